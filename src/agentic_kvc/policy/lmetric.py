"""`lmetric`: LMetric (arXiv 2603.15202), the affinity-free baseline of seed 003.

Route to argmin over instances of `(pending_prefill_tokens + new_uncached_tokens) *
num_requests`: the first factor is the prefill work the request would queue behind plus its
own, the second the batch it would share. No tuning knobs. Its cache term gives a soft
affinity by itself: a session's next turn has fewer uncached tokens where its prefix lives.
Ties (every score is 0 on an idle fleet) go to fewer uncached tokens, then fewer requests, then
a round-robin counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, lmetric_pick, uncached_tokens
from agentic_kvc.policy.registry import register


@register
class LMetric(ColocatingPolicy):
    name = "lmetric"
    description = (
        "argmin (pending prefill + uncached tokens) x requests; ties: uncached, requests, "
        "round-robin (LMetric, arXiv 2603.15202)."
    )

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        unc = uncached_tokens(request, fleet.cached_tokens(request))
        best, scores = lmetric_pick(candidates, unc, self.tie, len(fleet.instances))
        return best, "lmetric", scores
