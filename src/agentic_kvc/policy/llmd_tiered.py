"""llm-d's two ways of scoring a prefix held below HBM (issue 29), on the `llmd_weighted` profile.

`llmd_precise`: the precise prefix-cache scorer reads an index built from the engines' KV
events, in which every block entry names its pod and its device tier (`medium`). Its
`LongestPrefixScorer` walks the prompt's blocks from the first and, per pod, adds for each
consecutive block the weight of the best tier the pod holds it in, stopping at the first block
the pod lacks in every tier; the weights come per medium from the scorer's backend configs
(`gpu` 1.0, `cpu_pinned` 0.8 in llm-d's production-shaped benchmark of the scorer;
llm-d/llm-d-kv-cache pkg/kvcache/kvblock_scorer.go and its tests). Here, with TierHits being
contiguous in the order HBM, host, disk (what vLLM reloads),

    prefix_i = (gpu_w * hbm_i + cpu_w * host_i + disk_w * disk_i) / prompt tokens   (<= 1)

in place of `llmd_weighted`'s HBM-only prefix score, beside the same queue and KV-utilisation
scorers (weights 2 / 2 / 3, as the default profile). With a view that knows no tiers it is
`llmd_weighted` exactly.

`llmd_tiered`: the approximate recipe of llm-d's tiered-prefix-cache guide (guides/
tiered-prefix-cache/cpu): two approximate prefix-cache scorers, one with the GPU's LRU
capacity and one whose `lruCapacityPerServer` is set by hand to the CPU cache's blocks (vLLM
does not report it), beside the queue and KV-utilisation scorers, weighted 2 : 2 : 1 : 1
(queue : KV : GPU prefix : CPU prefix). The guide's reasoning: the CPU offload copies GPU
entries to CPU, so the CPU cache is a superset of the GPU's and the two prefix weights sum to
2. Here the GPU scorer is the HBM prefix (`hbm_i / prompt`) and the CPU scorer the prefix held
in HBM or host memory (`(hbm_i + host_i) / prompt`, the superset); the disk is not scored
(the recipe has no disk scorer). The router's estimated view (cache/tier_index.py) is that
recipe's pair of LRUs.

Both name the chosen instance's host and disk tokens in the decision as reloads
(`Decision.predicted_host_tokens`), so the router's pending-prefill count leaves them out.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.llmd_weighted import LlmdParams, LlmdWeighted
from agentic_kvc.policy.registry import register


class LlmdPreciseParams(LlmdParams):
    gpu_weight: float = Field(1.0, ge=0, description="Weight of a block held in HBM ('gpu').")
    cpu_weight: float = Field(
        0.8, ge=0, description="Weight of a block held in host memory ('cpu_pinned')."
    )
    disk_weight: float = Field(
        0.0,
        ge=0,
        description="Weight of a block held on disk (llm-d names none by default: 0).",
    )


@register
class LlmdPrecise(LlmdWeighted):
    name = "llmd_precise"
    Params = LlmdPreciseParams
    description = (
        "llm-d precise prefix scorer: prefix score weighs each block by the tier that holds "
        "it (gpu 1.0, cpu 0.8), beside queue and KV-utilisation scorers (2:2:3)."
    )

    def prefix_scores(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> dict[int, float]:
        p: LlmdPreciseParams = self.params  # type: ignore[assignment]
        if not fleet.knows_tiers:
            return super().prefix_scores(request, fleet, candidates)
        self.reload_tiers = tiers = fleet.tier_hits(request)
        bs = max(request.block_size, 1)
        total = max(request.input_tokens // bs, 1) * bs
        out = {}
        for i in candidates:
            t = tiers[i.index]
            held = p.gpu_weight * t.hbm + p.cpu_weight * t.host + p.disk_weight * t.disk
            out[i.index] = min(held / total, 1.0)
        return out


class LlmdTieredParams(LlmdParams):
    queue_weight: float = Field(2.0, ge=0, description="Weight of the queue scorer.")
    kv_weight: float = Field(2.0, ge=0, description="Weight of the KV-utilisation scorer.")
    prefix_weight: float = Field(1.0, ge=0, description="Weight of the GPU prefix scorer.")
    cpu_prefix_weight: float = Field(
        1.0, ge=0, description="Weight of the CPU prefix scorer (HBM + host prefix)."
    )


@register
class LlmdTiered(LlmdWeighted):
    name = "llmd_tiered"
    Params = LlmdTieredParams
    description = (
        "llm-d tiered-prefix-cache recipe: GPU and CPU prefix scorers beside queue and "
        "KV-utilisation scorers, weights 2:2:1:1 (queue:KV:GPU:CPU)."
    )

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._cpu: dict[int, float] = {}  # this decision's CPU prefix scores

    def prefix_scores(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> dict[int, float]:
        gpu = super().prefix_scores(request, fleet, candidates)
        if fleet.knows_tiers:
            self.reload_tiers = tiers = fleet.tier_hits(request)
            bs = max(request.block_size, 1)
            total = max(request.input_tokens // bs, 1) * bs
            self._cpu = {
                i.index: min((tiers[i.index].hbm + tiers[i.index].host) / total, 1.0)
                for i in candidates
            }
        else:  # no tier below HBM: the CPU scorer sees what the GPU one does
            self._cpu = gpu
        return gpu

    def extra_score(self, inst: InstanceView) -> float:
        p: LlmdTieredParams = self.params  # type: ignore[assignment]
        return p.cpu_prefix_weight * self._cpu[inst.index]
