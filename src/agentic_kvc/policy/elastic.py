"""`elastic`: elastic P2P offload (seed 000): offload a HEAVY prefill only when it pays.

D is the session's sticky instance (its affinity instance when it can serve, else the
cache/load-balance choice). The request is classified by D's cache (WARM / MEDIUM / HEAVY as
in `adaptive`); only HEAVY may be offloaded, to P = the least-loaded other prefill-capable
instance (load = ongoing tokens: pending prefill + decode KV).

`mode="heuristic"` (the seed's simplified rule), checked in this order:
  D has no decode running                        -> colocate, "d_idle"
  P.ongoing >= D.ongoing, or P.ongoing > avg * p_overload_factor (1.5)
                                                 -> colocate, "p_overloaded"
  otherwise (P has room, D is decoding)          -> offload,  "p_idle_d_busy"
`mode="cost"` (the seed's cost form):
  benefit = (new / prefill_throughput if D is decoding else 0) * disruption_factor (0.5)
  cost    = P.ongoing / prefill_throughput + kv_transfer_s (0.5)
  offload iff benefit > cost; otherwise "d_idle" (D not decoding) or "p_overloaded".
Non-HEAVY requests stay on D with reason "below_threshold". The seed checks P's load before
D's idleness; the outcome is the same (colocate), only the reason is more specific here.
`offload="always"` / `"never"` replace the rule by its two bounds (every HEAVY request
offloaded / none, reason "forced"), which the elastic-vs-load study compares it with.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentic_kvc.policy.base import Decision, FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import (
    CacheLBPolicy,
    ClassParams,
    cache_lb_pick,
    classify,
    colocated_candidates,
    least_ongoing,
    mean,
    uncached_tokens,
)
from agentic_kvc.policy.registry import register


class ElasticParams(ClassParams):
    offload: Literal["elastic", "always", "never"] = Field(
        "elastic",
        description="The elastic rule, or the bounds it is compared with: offload every HEAVY "
        "request that has a peer ('always', reason 'forced') or none ('never', 'forced').",
    )
    mode: Literal["heuristic", "cost"] = Field(
        "heuristic", description="Offload rule: the simplified heuristic or the cost form."
    )
    p_overload_factor: float = Field(
        1.5, gt=0, description="Heuristic: P is overloaded above average ongoing tokens * this."
    )
    prefill_throughput: float = Field(
        7000.0, gt=0, description="Cost form: prefill tokens per second."
    )
    kv_transfer_s: float = Field(0.5, ge=0, description="Cost form: KV transfer time (s).")
    disruption_factor: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Cost form: share of a colocated prefill that stalls decode (chunked "
        "prefill overlaps part of it).",
    )


@register
class Elastic(CacheLBPolicy):
    name = "elastic"
    Params = ElasticParams
    description = (
        "Session-sticky colocation; a HEAVY prefill is offloaded to the least-loaded peer "
        "only when P has room and D is decoding (seed 000)."
    )

    def _offload_reason(
        self, request: RequestView, cached_d: int, d: InstanceView, pre: InstanceView, avg: float
    ) -> str:
        p: ElasticParams = self.params  # type: ignore[assignment]
        d_decoding = d.decode_tokens > 0 or d.decode_requests > 0
        if not d_decoding:
            return "d_idle"
        if p.mode == "heuristic":
            if pre.ongoing_tokens >= d.ongoing_tokens:
                return "p_overloaded"
            if pre.ongoing_tokens > avg * p.p_overload_factor:
                return "p_overloaded"
            return "p_idle_d_busy"
        new = max(request.input_tokens - cached_d, 0)
        benefit = new / p.prefill_throughput * p.disruption_factor
        cost = pre.ongoing_tokens / p.prefill_throughput + p.kv_transfer_s
        return "p_idle_d_busy" if benefit > cost else "p_overloaded"

    def _decide(self, request: RequestView, fleet: FleetView) -> Decision:
        p: ElasticParams = self.params  # type: ignore[assignment]
        cands = colocated_candidates(fleet)
        if not cands:
            return super()._decide(request, fleet)
        n = len(fleet.instances)
        cached = fleet.cached_tokens(request)
        owner = fleet.affinity.get(request.session_id) if request.session_id else None
        d = next((i for i in cands if i.index == owner), None)
        if d is None:
            d, _ = cache_lb_pick(cands, uncached_tokens(request, cached), self.tie, n)
        scores = {i.index: i.ongoing_tokens for i in fleet.healthy()}
        cls = classify(request.input_tokens, cached[d.index], p)
        if cls != "HEAVY":
            return self.decision(request, d, d, "below_threshold", scores, cached, cls)
        others = [i for i in fleet.prefill_candidates() if i.index != d.index]
        if not others:
            return self.decision(request, d, d, "no_prefill_peer", scores, cached, cls)
        pre = least_ongoing(others, self.tie, n)
        if p.offload != "elastic":  # the bounds the elastic rule sits between
            dest = pre if p.offload == "always" else d
            return self.decision(request, dest, d, "forced", scores, cached, cls)
        avg = mean([i.ongoing_tokens for i in fleet.healthy()])
        reason = self._offload_reason(request, cached[d.index], d, pre, avg)
        if reason == "p_idle_d_busy":
            return self.decision(request, pre, d, reason, scores, cached, cls)
        return self.decision(request, d, d, reason, scores, cached, cls)
