"""`round_robin`: the baseline ("linear" in the seeds). Cycles over healthy instances."""

from __future__ import annotations

from agentic_kvc.policy.base import Decision, FleetView, NoHealthyInstance, Policy, RequestView
from agentic_kvc.policy.registry import register


@register
class RoundRobin(Policy):
    name = "round_robin"
    description = "Cycle over healthy instances; ignores cache and load."

    def __init__(self, params=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params)
        self._next = 0

    def decide(self, request: RequestView, fleet: FleetView) -> Decision:
        n = len(fleet.instances)
        for step in range(n):
            idx = (self._next + step) % n
            inst = fleet.instances[idx]
            if inst.healthy and inst.can_prefill and inst.can_decode:
                self._next = idx + 1
                cached = fleet.cached_tokens(request)[idx]
                return Decision(idx, idx, "COLOCATED", "round_robin", self.name, cached)
        raise NoHealthyInstance("no healthy instance")
