"""`additive`: "Approach A" of seed 003, the additive cost model the hybrid replaced.

    cost_i = num_requests_i * decode_iteration_s            (batch contention)
           + pending_prefill_tokens_i / prefill_throughput  (prefill queue)
           + max(0, input - cached_i) / prefill_throughput  (this prompt's prefill)

With an affinity instance A, go to A when both gates pass: A.ongoing_tokens <= average
ongoing tokens * overload_factor, and cost_A <= best cost * overload_factor. Otherwise the
global argmin (ties: uncached tokens, requests, round-robin). Kept as a historical baseline:
its ordering leans on the two hardware constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams, argmin, mean, uncached_tokens
from agentic_kvc.policy.registry import register


class AdditiveParams(StrictParams):
    decode_iteration_s: float = Field(
        0.05, ge=0, description="Seconds one decode step costs per request in the batch."
    )
    prefill_throughput: float = Field(7000.0, gt=0, description="Prefill tokens per second.")
    overload_factor: float = Field(2.0, gt=0, description="Slack of both affinity gates.")


@register
class Additive(ColocatingPolicy):
    name = "additive"
    Params = AdditiveParams
    description = "Additive time-cost model with two affinity gates (seed 003, Approach A)."

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: AdditiveParams = self.params  # type: ignore[assignment]
        unc = uncached_tokens(request, fleet.cached_tokens(request))
        cost = {
            i.index: i.num_requests * p.decode_iteration_s
            + i.pending_prefill_tokens / p.prefill_throughput
            + unc[i.index] / p.prefill_throughput
            for i in candidates
        }
        best = argmin(
            candidates,
            lambda i: (cost[i.index], unc[i.index], i.num_requests),
            self.tie,
            len(fleet.instances),
        )
        owner = fleet.affinity.get(request.session_id) if request.session_id else None
        a = next((i for i in candidates if i.index == owner), None)
        if a is not None:
            avg_load = mean([i.ongoing_tokens for i in candidates])
            if (
                a.ongoing_tokens <= avg_load * p.overload_factor
                and cost[a.index] <= cost[best.index] * p.overload_factor
            ):
                return a, "affinity", cost
            return best, "cost_affinity_gated", cost
        return best, "cost", cost
