"""`unified`: the hybrid of seed 003, LMetric plus an explicit high-cache affinity gate.

1. Affinity: if the session has an affinity instance A (healthy, able to serve), and
   `cached_on_A / input > affinity_ratio` (0.5), and `A.num_requests <= avg * overload_factor`
   (average over the candidate instances; 2.0), route to A (reason "affinity").
2. Otherwise LMetric with its tie-breakers (reason "lmetric", or "lmetric_overloaded_affinity"
   when gate 2 is what failed).

The edge case from the design log: when A is overloaded but holds (almost) the whole prompt,
the fallback's LMetric score on A is tiny (few uncached tokens), so it re-elects A and the
overload gate achieves nothing. `request_ceiling` closes it: in the fallback, instances with
`num_requests > avg * request_ceiling` are not eligible unless every instance is over it.
Set it to None for the original behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import (
    ColocatingPolicy,
    StrictParams,
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
        2.0, gt=0, description="Affinity needs A.num_requests <= average * this."
    )
    request_ceiling: float | None = Field(
        2.0,
        gt=0,
        description="Fallback skips instances with num_requests > average * this "
        "(None: no ceiling, the seed's original behaviour).",
    )


@register
class Unified(ColocatingPolicy):
    name = "unified"
    Params = UnifiedParams
    description = (
        "Hybrid: session affinity when cache ratio > 0.5 and the owner is not overloaded, "
        "else LMetric (seed 003)."
    )

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: UnifiedParams = self.params  # type: ignore[assignment]
        cached = fleet.cached_tokens(request)
        avg = mean([i.num_requests for i in candidates])
        reason = "lmetric"
        owner = fleet.affinity.get(request.session_id) if request.session_id else None
        by_index = {i.index: i for i in candidates}
        if owner is not None and owner in by_index:
            a = by_index[owner]
            ratio = cached[owner] / request.input_tokens if request.input_tokens > 0 else 0.0
            loaded_ok = a.num_requests <= avg * p.overload_factor
            if ratio > p.affinity_ratio and loaded_ok:
                # The receipt shows every candidate, so a reader sees what affinity beat.
                n = max(request.input_tokens, 1)
                scores: dict[int, Any] = {
                    i.index: {"cache_ratio": cached[i.index] / n, "num_requests": i.num_requests}
                    for i in candidates
                }
                scores[a.index]["avg_requests"] = avg
                return a, "affinity", scores
            if ratio > p.affinity_ratio:
                reason = "lmetric_overloaded_affinity"
        eligible = list(candidates)
        if p.request_ceiling is not None:
            under = [i for i in candidates if i.num_requests <= avg * p.request_ceiling]
            if under:
                eligible = under
        unc = uncached_tokens(request, cached)
        best, scores = lmetric_pick(eligible, unc, self.tie, len(fleet.instances))
        return best, reason, scores
