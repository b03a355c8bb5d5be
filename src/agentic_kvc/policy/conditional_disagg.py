"""`conditional_disagg`: Dynamo-style conditional disaggregation (specification from
shared/notes/routing_anchors.md; llm-d's PD decider is the same idea with a token threshold).

Choose the decode instance first, by Dynamo's KV cost (prefill blocks + decode blocks, with
the cache the decode instance holds). Then prefill remotely unless it is not worth it:
- effective ISL (prompt tokens minus the decode instance's cached prefix) is small: below
  `max_local_prefill_tokens` (2048) and `effective / raw < max_local_prefill_ratio` (0.7):
  colocate ("local_small_prefill");
- the best prefill instance is busy (pending prefill tokens >= `prefill_busy_tokens`):
  colocate ("prefill_busy");
- no other instance can prefill: colocate ("no_prefill_peer").
Otherwise prefill on the prefill-capable instance (not the decode one) with the fewest pending
prefill tokens and move the KV ("remote_prefill"). A decode-only instance cannot prefill
locally, so for it the remote path is taken whatever the size.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import (
    Decision,
    FleetView,
    InstanceView,
    NoHealthyInstance,
    RequestView,
)
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams, argmin
from agentic_kvc.policy.registry import register


class ConditionalDisaggParams(StrictParams):
    max_local_prefill_tokens: int = Field(
        2048, ge=0, description="Prefill locally when effective ISL is below this ..."
    )
    max_local_prefill_ratio: float = Field(
        0.7, ge=0, le=1, description="... and effective/raw ISL is below this."
    )
    prefill_busy_tokens: int = Field(
        16_384, ge=1, description="A prefill instance with this many pending tokens is busy."
    )


def decode_by_kv_cost(
    name: str, tie: Any, request: RequestView, fleet: FleetView
) -> tuple[InstanceView, dict[int, int], dict[int, float]]:
    """The decode instance with the least KV work to take on (queued prefill, this prompt's
    uncached blocks, its running decodes), every instance's cached prefix of the prompt, and
    each decode candidate's KV cost in blocks."""
    n = len(fleet.instances)
    d_cands = fleet.decode_candidates()
    if not d_cands:
        raise NoHealthyInstance(f"{name}: no healthy instance can decode")
    cached = fleet.cached_tokens(request)
    bs = max(request.block_size, 1)
    blocks = math.ceil(request.input_tokens / bs)
    cost = {
        i.index: max(i.pending_prefill_tokens / bs + blocks - cached[i.index] / bs, 0.0)
        + i.decode_tokens / bs
        for i in d_cands
    }
    return argmin(d_cands, lambda i: (cost[i.index], i.num_requests), tie, n), cached, cost


@register
class ConditionalDisagg(ColocatingPolicy):
    name = "conditional_disagg"
    Params = ConditionalDisaggParams
    description = (
        "Pick decode by KV cost; prefill remotely unless the uncached part is small or the "
        "prefill instance is busy (Dynamo / llm-d)."
    )

    def _decide(self, request: RequestView, fleet: FleetView) -> Decision:
        p: ConditionalDisaggParams = self.params  # type: ignore[assignment]
        n = len(fleet.instances)
        d, cached, cost = decode_by_kv_cost(self.name, self.tie, request, fleet)
        effective = max(request.input_tokens - cached[d.index], 0)
        raw = max(request.input_tokens, 1)
        others = [i for i in fleet.prefill_candidates() if i.index != d.index]
        pre = (
            argmin(others, lambda i: (i.pending_prefill_tokens, i.num_requests), self.tie, n)
            if others
            else None
        )
        scores = {k: {"kv_cost": v} for k, v in cost.items()}
        scores[d.index]["effective_isl"] = effective
        if d.can_prefill:
            if (
                effective < p.max_local_prefill_tokens
                and effective / raw < p.max_local_prefill_ratio
            ):
                return self.decision(request, d, d, "local_small_prefill", scores, cached)
            if pre is None:
                return self.decision(request, d, d, "no_prefill_peer", scores, cached)
            if pre.pending_prefill_tokens >= p.prefill_busy_tokens:
                return self.decision(request, d, d, "prefill_busy", scores, cached)
        if pre is None:
            raise NoHealthyInstance(f"{self.name}: no healthy instance can prefill")
        return self.decision(request, pre, d, "remote_prefill", scores, cached)
