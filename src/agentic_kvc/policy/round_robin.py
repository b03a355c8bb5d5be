"""`round_robin`: the baseline ("linear" in the seeds). Cycles over healthy instances."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, candidate_at
from agentic_kvc.policy.registry import register


@register
class RoundRobin(ColocatingPolicy):
    name = "round_robin"
    uses_tier_view = False  # routes on the HBM hit alone
    description = "Cycle over healthy instances; ignores cache and load."

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._next = 0

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        n = len(fleet.instances)
        idx = self._next % n
        inst = candidate_at(candidates, n, idx)
        if inst is not None:  # the next instance is a candidate (every one, mostly)
            self._next = idx + 1
            return inst, "round_robin", {}
        ok = {i.index: i for i in candidates}
        for step in range(n):
            idx = (self._next + step) % n
            if idx in ok:
                self._next = idx + 1
                return ok[idx], "round_robin", {}
        raise AssertionError("unreachable: candidates is non-empty")
