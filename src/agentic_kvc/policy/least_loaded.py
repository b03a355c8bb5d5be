"""`least_loaded`: the plain load balancer. argmin of the router's in-flight requests, then
pending prefill tokens, then a round-robin counter; no cache term (vLLM production-stack's
and most gateways' default)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, argmin
from agentic_kvc.policy.registry import register


@register
class LeastLoaded(ColocatingPolicy):
    name = "least_loaded"
    uses_tier_view = False  # routes on the HBM hit alone
    description = "argmin in-flight requests, then pending prefill tokens; ignores the cache."

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        best = argmin(
            candidates,
            lambda i: (i.num_requests, i.pending_prefill_tokens),
            self.tie,
            len(fleet.instances),
        )
        return best, "least_loaded", {i.index: i.num_requests for i in candidates}
