"""`adaptive`: adaptive prefill offload (seed 002).

Classify the request by the best cache estimate over the fleet (max cached tokens):
WARM (cached/input > 0.5 or new < 5k), MEDIUM (new < T), HEAVY (new >= T; T = 20k).

- WARM / MEDIUM: colocated on the cache/load-balance choice (argmin ongoing tokens +
  uncached tokens), reason "cache_lb".
- HEAVY, `version=1` (routing only): colocated on the instance with the least decode load,
  so a long prefill does not stall someone else's decode; reason "heavy_least_decode".
- HEAVY, `version=2` (KV transfer): decode on the cache/LB choice, prefill on the
  least-loaded *other* prefill-capable instance, KV moved P -> D; reason "heavy_offload"
  ("heavy_no_peer" when no other instance can prefill, so it stays colocated).

The session's affinity is recorded by the router state (the decode instance), as in the seed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentic_kvc.policy.base import Decision, FleetView, RequestView
from agentic_kvc.policy.common import (
    CacheLBPolicy,
    ClassParams,
    cache_lb_pick,
    classify,
    colocated_candidates,
    least_decode_load,
    least_ongoing,
    uncached_tokens,
)
from agentic_kvc.policy.registry import register


class AdaptiveParams(ClassParams):
    version: Literal[1, 2] = Field(
        1, description="1: HEAVY routed to least decode load; 2: HEAVY prefill offloaded."
    )


@register
class Adaptive(CacheLBPolicy):
    name = "adaptive"
    Params = AdaptiveParams
    description = (
        "WARM/MEDIUM colocated by cache+load; HEAVY to least decode load (v1) or prefilled "
        "elsewhere with KV transfer (v2) (seed 002)."
    )

    def _decide(self, request: RequestView, fleet: FleetView) -> Decision:
        p: AdaptiveParams = self.params  # type: ignore[assignment]
        cands = colocated_candidates(fleet)
        if not cands:  # a pure PD fleet: nothing to adapt, split by the cache/LB rule
            return super()._decide(request, fleet)
        n = len(fleet.instances)
        cached = fleet.cached_tokens(request)
        best_cached = max(cached[i.index] for i in cands)
        cls = classify(request.input_tokens, best_cached, p)
        lb, scores = cache_lb_pick(cands, uncached_tokens(request, cached), self.tie, n)
        if cls != "HEAVY":
            return self.decision(request, lb, lb, "cache_lb", scores, cached, cls)
        if p.version == 1:
            h = least_decode_load(cands, self.tie, n)
            dscores = {i.index: i.decode_tokens for i in cands}
            return self.decision(request, h, h, "heavy_least_decode", dscores, cached, cls)
        others = [i for i in fleet.prefill_candidates() if i.index != lb.index]
        if not others:
            return self.decision(request, lb, lb, "heavy_no_peer", scores, cached, cls)
        pre = least_ongoing(others, self.tie, n)
        return self.decision(request, pre, lb, "heavy_offload", scores, cached, cls)
