"""`sglang_cache_aware`: SGLang router / vllm-router `cache_aware` (specification from
shared/notes/routing_anchors.md; reimplemented, no code copied).

Load is the router's own in-flight request count. If the fleet is imbalanced,
`max_load - min_load > balance_abs_threshold` AND `max_load > balance_rel_threshold *
min_load`, go to the least loaded instance ("imbalanced"). Otherwise compute the match ratio
`matched/input` per instance from the router's prefix view (the real router keeps a radix
tree of routed prompts with LRU eviction, 120 s by default: use the estimated index with
`ttl_s=120`); if the best ratio exceeds `cache_threshold` go to that instance ("cache_hit",
ties to the less loaded), else to the least loaded ("cache_miss").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams, argmin
from agentic_kvc.policy.registry import register


class SglangParams(StrictParams):
    cache_threshold: float = Field(
        0.3, ge=0, le=1, description="Go to the best-matching instance when match > this."
    )
    balance_abs_threshold: int = Field(
        64, ge=0, description="Imbalanced when max - min in-flight requests exceeds this ..."
    )
    balance_rel_threshold: float = Field(
        1.5, ge=1, description="... and max in-flight requests > this * min."
    )


@register
class SglangCacheAware(ColocatingPolicy):
    name = "sglang_cache_aware"
    uses_tier_view = False  # routes on the HBM hit alone
    Params = SglangParams
    description = (
        "SGLang cache_aware: least loaded when imbalanced, else best prefix match above a "
        "threshold, else least loaded."
    )

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: SglangParams = self.params  # type: ignore[assignment]
        n = len(fleet.instances)
        loads = [i.num_requests for i in candidates]
        lo, hi = min(loads), max(loads)
        least = argmin(candidates, lambda i: (i.num_requests,), self.tie, n)
        if hi - lo > p.balance_abs_threshold and hi > p.balance_rel_threshold * lo:
            return least, "imbalanced", {i.index: i.num_requests for i in candidates}
        cached = fleet.cached_tokens(request)
        denom = max(request.input_tokens, 1)
        match = {i.index: cached[i.index] / denom for i in candidates}
        best = argmin(candidates, lambda i: (-match[i.index], i.num_requests), self.tie, n)
        if match[best.index] > p.cache_threshold:
            return best, "cache_hit", match
        return least, "cache_miss", match
