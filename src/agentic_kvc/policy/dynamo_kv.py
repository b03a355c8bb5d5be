"""`dynamo_kv` and `dynamo_lmetric`: NVIDIA Dynamo's KV router cost functions (specification
from shared/notes/routing_anchors.md; reimplemented). Loads are counted in blocks:

    prefill_blocks_i = max(pending_prefill_i/bs + prompt_blocks - overlap_blocks_i, 0)
    dynamo_kv:      cost_i = overlap_weight * prefill_blocks_i + decode_blocks_i
    dynamo_lmetric: cost_i = prefill_blocks_i * (decode_blocks_i + 1)

with decode_blocks_i = decode KV tokens / bs. argmin; at temperature 0 ties go to fewer
requests then round-robin; at temperature T > 0 an instance is drawn with probability
proportional to exp(-cost / (T * max cost)) from a seeded generator. Dynamo's default view is
exact (KV events); without events it inserts on route with a 120 s TTL.

Tiers below HBM (issue 29). Dynamo's router credits a prefix the worker holds in a lower tier
at a fixed fraction of an HBM hit: `--router-host-cache-hit-weight` (default 0.75, the CPU
tier: vLLM's OffloadingConnector, SGLang HiCache) and `--router-disk-cache-hit-weight` (default
0.25), both applied to the overlap that continues past the device-tier hit (its lower-tier
indexers walk on from where the device match ends; ai-dynamo/dynamo docs/components/router/
router-offloading.md, router-configuration.md). So here

    overlap_blocks_i = (hbm_i + host_weight * host_i + disk_weight * disk_i) / bs

from the view's `tier_hits`; with a view that knows no tiers (or weights 0) it is the HBM hit
and the cost is the one above, unchanged. The receipt then counts the host and disk tokens as
reloads on the chosen instance (`Decision.predicted_host_tokens`), not as prefill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import SeededColocatingPolicy, StrictParams, argmin
from agentic_kvc.policy.registry import register


class DynamoParams(StrictParams):
    overlap_weight: float = Field(
        1.0, ge=0, description="Weight of prefill blocks against decode blocks (dynamo_kv)."
    )
    temperature: float = Field(0.0, ge=0, description="0: argmin; > 0: softmax sampling.")
    seed: int = Field(0, description="Seed of the sampling draw when temperature > 0.")
    host_cache_hit_weight: float = Field(
        0.75,
        ge=0,
        le=1,
        description="Credit of a host-memory block after the HBM hit, in HBM blocks "
        "(Dynamo --router-host-cache-hit-weight). Used only when the view knows tiers.",
    )
    disk_cache_hit_weight: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Credit of a disk block after the host hit (--router-disk-cache-hit-weight).",
    )


class _DynamoBase(SeededColocatingPolicy):
    Params = DynamoParams

    def cost(self, prefill_blocks: float, decode_blocks: float) -> float:
        raise NotImplementedError

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: DynamoParams = self.params  # type: ignore[assignment]
        bs = max(request.block_size, 1)
        wh, wd = p.host_cache_hit_weight, p.disk_cache_hit_weight
        overlap: Sequence[float]
        if fleet.knows_tiers and (wh or wd):
            self.reload_tiers = tiers = fleet.tier_hits(request)
            overlap = [t.hbm + wh * t.host + wd * t.disk for t in tiers]
        else:
            overlap = fleet.cached_tokens(request)
        prompt_blocks = math.ceil(request.input_tokens / bs)
        cost: dict[int, float] = {}
        for i in candidates:
            pre = max(i.pending_prefill_tokens / bs + prompt_blocks - overlap[i.index] / bs, 0.0)
            cost[i.index] = self.cost(pre, i.decode_tokens / bs)
        if p.temperature > 0 and len(candidates) > 1:
            scale = max(max(cost.values()), 1e-9) * p.temperature
            weights = [math.exp(-(cost[i.index] - min(cost.values())) / scale) for i in candidates]
            pick = self._rng.choices(list(candidates), weights=weights, k=1)[0]
            return pick, "sampled", cost
        best = argmin(
            candidates, lambda i: (cost[i.index], i.num_requests), self.tie, len(fleet.instances)
        )
        return best, "min_cost", cost


@register
class DynamoKV(_DynamoBase):
    name = "dynamo_kv"
    description = "Dynamo KV router: argmin overlap_weight * prefill blocks + decode blocks."

    def cost(self, prefill_blocks: float, decode_blocks: float) -> float:
        return self.params.overlap_weight * prefill_blocks + decode_blocks  # type: ignore[attr-defined]


@register
class DynamoLMetric(_DynamoBase):
    name = "dynamo_lmetric"
    description = "Dynamo lmetric: argmin prefill blocks * (decode blocks + 1)."

    def cost(self, prefill_blocks: float, decode_blocks: float) -> float:
        return prefill_blocks * (decode_blocks + 1)
