"""`llmd_weighted`: the llm-d inference scheduler's default profile (specification from
shared/notes/routing_anchors.md; reimplemented).

Each instance gets three scores in [0, 1] and the highest weighted sum wins:
- queue (weight 2): `(maxQ - q) / (maxQ - minQ)`, q = the engine's waiting queue when a fresh
  scrape has it, else the router's requests not yet past their first token (all 1 when equal);
- KV (weight 2): `1 - kv_usage` (fresh scrape; 1 when unknown, i.e. neutral);
- prefix (weight 3): matched blocks / prompt blocks.
Optional prefix-affinity filter: keep only instances with prefix score >= 0.80 (when any), except
in a seeded `explore_rate` (1%) of decisions, which score the whole fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import (
    SeededColocatingPolicy,
    StrictParams,
    argmin,
    fresh_engine_value,
)
from agentic_kvc.policy.registry import register


class LlmdParams(StrictParams):
    queue_weight: float = Field(2.0, ge=0, description="Weight of the queue scorer.")
    kv_weight: float = Field(2.0, ge=0, description="Weight of the KV-utilisation scorer.")
    prefix_weight: float = Field(3.0, ge=0, description="Weight of the prefix scorer.")
    affinity_filter: bool = Field(False, description="Apply the prefix-affinity filter.")
    affinity_threshold: float = Field(
        0.8, ge=0, le=1, description="Filter keeps instances with prefix score >= this."
    )
    explore_rate: float = Field(
        0.01, ge=0, le=1, description="Share of decisions that skip the filter."
    )
    max_scrape_age_s: float = Field(
        5.0, ge=0, description="Scraped engine values older than this are not used."
    )
    seed: int = Field(0, description="Seed of the exploration draw (deterministic runs).")


@register
class LlmdWeighted(SeededColocatingPolicy):
    name = "llmd_weighted"
    Params = LlmdParams
    description = (
        "llm-d default profile: max of 2*queue + 2*KV + 3*prefix scores, optional "
        "prefix-affinity filter."
    )

    def _queue(self, i: InstanceView, max_age: float) -> int:
        waiting = fresh_engine_value(i.engine_waiting, i, max_age)
        return int(waiting) if waiting is not None else i.num_requests - i.decode_requests

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: LlmdParams = self.params  # type: ignore[assignment]
        prefix = self.prefix_scores(request, fleet, candidates)
        reason = "weighted"
        pool = list(candidates)
        if p.affinity_filter:
            explore = self._rng.random() < p.explore_rate
            sticky = [i for i in pool if prefix[i.index] >= p.affinity_threshold]
            if explore:
                reason = "weighted_explore"
            elif sticky:
                pool, reason = sticky, "weighted_affinity"
        q = {i.index: self._queue(i, p.max_scrape_age_s) for i in pool}
        qmin, qmax = min(q.values()), max(q.values())
        scores: dict[int, Any] = {}
        for i in pool:
            queue = 1.0 if qmax == qmin else (qmax - q[i.index]) / (qmax - qmin)
            usage = fresh_engine_value(i.kv_usage, i, p.max_scrape_age_s)
            kv = 1.0 - float(usage) if usage is not None else 1.0
            scores[i.index] = (
                p.queue_weight * queue
                + p.kv_weight * kv
                + p.prefix_weight * prefix[i.index]
                + self.extra_score(i)
            )
        best = argmin(pool, lambda i: (-scores[i.index],), self.tie, len(fleet.instances))
        return best, reason, scores

    def prefix_scores(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> dict[int, float]:
        """The prefix scorer: matched (HBM) blocks / prompt blocks, per candidate."""
        cached = fleet.cached_tokens(request)
        bs = max(request.block_size, 1)
        total_blocks = max(request.input_tokens // bs, 1)
        return {i.index: min(cached[i.index] // bs / total_blocks, 1.0) for i in candidates}

    def extra_score(self, inst: InstanceView) -> float:
        """Weighted scores of further scorers (a subclass's); none here."""
        return 0.0
