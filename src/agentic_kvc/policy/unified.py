"""`unified`: the hybrid of seed 003, LMetric plus an explicit high-cache affinity gate.

1. Affinity: if the session has an affinity instance A (healthy, able to serve), and
   `cached_on_A / input > affinity_ratio` (0.5), and A is not overloaded (gate 2), route to A
   (reason "affinity").
2. Otherwise LMetric with its tie-breakers (reason "lmetric", or "lmetric_overloaded_affinity"
   when gate 2 is what failed).

Gate 2 (`overload_test`). The seed's rule, `requests`: `A.num_requests <= avg *
overload_factor`. It ignores what leaving costs, and at low load (avg ~1) a session with a
50k-token cache is moved because its owner runs 3 requests, to recompute the whole prefix
elsewhere (docs/policies.md, "unified on long contexts"). The default, `cost`: stay unless
A's cost exceeds `overload_factor` times the cheapest candidate's, with cost = (pending
prefill + this prompt's uncached tokens there) x (requests + 1): LMetric's score counting the
request itself, so an idle instance costs the prefix a move recomputes instead of 0. The
load a session tolerates on its owner thus grows with the cache it would lose, and a queue
of prefill on the owner (`pending_prefill_tokens`, which includes requests the engine has
not admitted) is what makes it leave.

The edge case from the design log: when A is overloaded but holds (almost) the whole prompt,
the fallback's LMetric score on A is tiny (few uncached tokens), so it re-elects A and the
overload gate achieves nothing. `request_ceiling` closes it: in the fallback, instances with
`num_requests > avg * request_ceiling` are not eligible unless every instance is over it.
Set it to None for the original behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import (
    ColocatingPolicy,
    StrictParams,
    candidate_at,
    lmetric_pick,
    mean,
    uncached_tokens,
)
from agentic_kvc.policy.registry import register


class UnifiedParams(StrictParams):
    affinity_ratio: float = Field(
        0.5, ge=0, le=1, description="Affinity needs cached/input strictly above this."
    )
    overload_factor: float = Field(
        2.0,
        gt=0,
        description="Gate 2's factor: A's cost (or, for overload_test=requests, its "
        "num_requests) may be at most this times the cheapest (the average).",
    )
    request_ceiling: float | None = Field(
        2.0,
        gt=0,
        description="Fallback skips instances with num_requests > average * this "
        "(None: no ceiling, the seed's original behaviour).",
    )
    overload_test: Literal["cost", "requests"] = Field(
        "cost",
        description="Gate 2. cost: A.cost <= min cost * overload_factor, cost = (pending "
        "prefill + uncached) x (requests + 1); requests: A.num_requests <= average * "
        "overload_factor (the seed's rule).",
    )


@register
class Unified(ColocatingPolicy):
    name = "unified"
    Params = UnifiedParams
    description = (
        "Hybrid: session affinity when cache ratio > 0.5 and the owner's cost is within 2x "
        "the cheapest instance's, else LMetric (seed 003; cost gate added here)."
    )

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: UnifiedParams = self.params  # type: ignore[assignment]
        cached = fleet.cached_tokens(request)
        unc = uncached_tokens(request, cached)
        requests = [i.num_requests for i in candidates]
        avg = mean(requests)
        reason = "lmetric"
        owner = fleet.affinity.get(request.session_id) if request.session_id else None
        a = candidate_at(candidates, len(fleet.instances), owner) if owner is not None else None
        if a is not None:
            ratio = cached[owner] / request.input_tokens if request.input_tokens > 0 else 0.0
            if p.overload_test == "cost":
                # only A's cost and the cheapest are needed
                cheapest = min(map(affinity_cost, candidates, [unc[i.index] for i in candidates]))
                loaded_ok = affinity_cost(a, unc[owner]) <= p.overload_factor * cheapest
            else:
                loaded_ok = a.num_requests <= avg * p.overload_factor
            if ratio > p.affinity_ratio and loaded_ok:
                # The receipt shows every candidate, so a reader sees what affinity beat.
                n = max(request.input_tokens, 1)
                # Equal entries share one dict (most instances hold just the system prompt and
                # run a few requests): a large fleet's receipts stay small in memory.
                entries: dict[tuple[int, int], dict[str, Any]] = {}
                scores: dict[int, Any] = {}
                for i, r in zip(candidates, requests, strict=True):
                    key = (cached[i.index], r)
                    entry = entries.get(key)
                    if entry is None:
                        entry = entries[key] = {"cache_ratio": key[0] / n, "num_requests": r}
                    scores[i.index] = entry
                scores[a.index] = {**scores[a.index], "avg_requests": avg}
                return a, "affinity", scores
            if ratio > p.affinity_ratio:
                reason = "lmetric_overloaded_affinity"
        eligible = candidates
        if p.request_ceiling is not None:
            limit = avg * p.request_ceiling
            if max(requests) > limit:  # else every candidate is under the ceiling
                under = [i for i, r in zip(candidates, requests, strict=True) if r <= limit]
                if under:
                    eligible = under
        best, scores = lmetric_pick(eligible, unc, self.tie, len(fleet.instances))
        return best, reason, scores


def affinity_cost(inst: InstanceView, uncached: int) -> int:
    """LMetric's score counting the request itself in the batch it joins: (pending prefill +
    this prompt's uncached tokens) x (requests + 1). Unlike LMetric's, an idle instance's cost
    is not 0 but the prefill the request would do there, so leaving a cache is charged for
    the prefix it recomputes."""
    return (inst.pending_prefill_tokens + uncached) * (inst.num_requests + 1)
