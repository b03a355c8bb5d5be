"""`static_pd`: static prefill/decode disaggregation (xPyD, DistServe / Splitwise style).

Every request is prefilled in the prefill pool and decoded in the decode pool, with the KV
moved between them. Pools, in order of precedence:
1. `prefill` and `decode` index lists in the parameters (e.g. 6P+2D: [0..5] and [6, 7]);
2. the instances' roles: role "prefill" -> prefill pool, role "decode" -> decode pool (when
   only one kind is declared, every other instance forms the other pool);
3. otherwise the first round(n * prefill_fraction) instances prefill and the rest decode.
Within a pool the least loaded wins: prefill by pending prefill tokens, decode by decode KV
tokens, each then by requests and a round-robin counter. If a pool has no healthy member, any
healthy instance able to do that phase stands in (reason says so) rather than failing.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from agentic_kvc.policy.base import (
    Decision,
    FleetView,
    InstanceView,
    NoHealthyInstance,
    RequestView,
)
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams, argmin
from agentic_kvc.policy.registry import register


class StaticPDParams(StrictParams):
    prefill: list[int] | None = Field(None, description="Prefill pool (instance indices).")
    decode: list[int] | None = Field(None, description="Decode pool (instance indices).")
    prefill_fraction: float = Field(
        0.75, gt=0, lt=1, description="Share of instances prefilling when no pools are given."
    )

    @model_validator(mode="after")
    def _pools(self) -> StaticPDParams:
        if (self.prefill is None) != (self.decode is None):
            raise ValueError("give both prefill and decode pools, or neither")
        if self.prefill is not None and self.decode is not None:
            if not self.prefill or not self.decode:
                raise ValueError("prefill and decode pools must not be empty")
            if min(self.prefill + self.decode) < 0:
                raise ValueError("instance indices must be >= 0")
            both = set(self.prefill) & set(self.decode)
            if both:
                raise ValueError(f"instances {sorted(both)} are in both pools")
        return self

    def fleet_problem(self, instances: int) -> str | None:
        if self.prefill is None or self.decode is None:
            return None
        bad = [i for i in self.prefill + self.decode if i >= instances]
        if not bad:
            return None
        return f"static_pd pool indices {bad} out of range for a fleet of {instances} instances"


@register
class StaticPD(ColocatingPolicy):
    name = "static_pd"
    Params = StaticPDParams
    description = "Fixed prefill and decode pools (xPyD); least loaded within each pool."

    def pools(self, fleet: FleetView) -> tuple[list[int], list[int], str]:
        p: StaticPDParams = self.params  # type: ignore[assignment]
        n = len(fleet.instances)
        if p.prefill is not None and p.decode is not None:
            problem = p.fleet_problem(n)
            if problem:  # (the proxy's engines: a run config was refused before its run)
                raise ValueError(f"field 'policy.params': {problem}")
            return list(p.prefill), list(p.decode), "params"
        pre = [i.index for i in fleet.instances if i.role == "prefill"]
        dec = [i.index for i in fleet.instances if i.role == "decode"]
        if pre or dec:
            everyone = [i.index for i in fleet.instances]
            pre = pre or [i for i in everyone if i not in dec]
            dec = dec or [i for i in everyone if i not in pre]
            return pre, dec, "roles"
        if n == 1:
            return [0], [0], "single"
        k = max(1, min(n - 1, round(n * p.prefill_fraction)))
        return list(range(k)), list(range(k, n)), "fraction"

    def _decide(self, request: RequestView, fleet: FleetView) -> Decision:
        pre_ids, dec_ids, source = self.pools(fleet)
        n = len(fleet.instances)
        reason = f"pools_{source}"
        pre_pool = [fleet.instances[i] for i in pre_ids]
        dec_pool = [fleet.instances[i] for i in dec_ids]
        pre_ok = [i for i in pre_pool if i.healthy and i.can_prefill]
        dec_ok = [i for i in dec_pool if i.healthy and i.can_decode]
        if not pre_ok:
            pre_ok, reason = fleet.prefill_candidates(), reason + "+prefill_pool_down"
        if not dec_ok:
            dec_ok, reason = fleet.decode_candidates(), reason + "+decode_pool_down"
        if not pre_ok or not dec_ok:
            raise NoHealthyInstance(f"static_pd: no healthy instance for {request.request_id}")
        p = argmin(pre_ok, self._prefill_key, self.tie, n)
        d = argmin(dec_ok, self._decode_key, self.tie, n)
        scores = {i.index: {"pending_prefill_tokens": i.pending_prefill_tokens} for i in pre_ok}
        for i in dec_ok:
            scores.setdefault(i.index, {})["decode_tokens"] = i.decode_tokens
        return self.decision(request, p, d, reason, scores, fleet.cached_tokens(request))

    @staticmethod
    def _prefill_key(i: InstanceView) -> tuple[int, int]:
        return (i.pending_prefill_tokens, i.num_requests)

    @staticmethod
    def _decode_key(i: InstanceView) -> tuple[int, int, int]:
        return (i.decode_tokens, i.decode_requests, i.num_requests)
