"""Two gateways' prefix-match routers, reimplemented from their source (read, not copied):

`aibrix_prefix_cache`: AIBrix's `prefix-cache` algorithm (vllm-project/aibrix,
pkg/plugins/gateway/algorithms/prefix_cache.go). Load is each pod's running requests (here the
router's in-flight requests). A load gate first: when the busiest instance holds more than
`imbalance_factor` x (mean + 1) requests and at least `imbalance_min_gap` more than the least
loaded, matching is restricted to the least-loaded instances. Among the instances whose prefix
index matches the prompt, ordered by match percentage (matched blocks / prompt blocks, an
integer, as AIBrix's index reports it) descending, then fewer requests, ties in a seeded random
order, the first whose requests are at most mean + `std_factor` x the standard deviation (over
all instances) wins ("prefix_match"); with no match, or none within that bound, the least
loaded instance ("least_request_fallback" / "prefix_match_skipped").

`production_stack_prefix`: vLLM production-stack's `prefixaware` router
(vllm-project/production-stack, src/vllm_router/routers/routing_logic.py, PrefixAwareRouter,
and prefix/hashtrie.py): the instances holding the longest match of the prompt in the router's
trie of routed prompts, all instances when none matches, and a random one of them; no load term
at all.

Both read the prompt's match from the fleet's cache view (the estimated view unless the run
says otherwise) instead of their own indexes: AIBrix hashes 4-character blocks of the text into
one LRU of 200k blocks with a 20-minute idle expiry, production-stack hashes 128-character
chunks into a trie it never evicts ("we assume that there is no eviction of prefix cache").
The view's blocks are token blocks, and it forgets what the engine evicted, so on prompts the
engine no longer holds both routers here are better informed than the originals.
docs/policies.md ("Peer policies") lists them beside the other peers.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import SeededColocatingPolicy, StrictParams, argmin
from agentic_kvc.policy.registry import register


class AIBrixParams(StrictParams):
    imbalance_factor: float = Field(
        2.0,
        ge=1,
        description="Load gate: busiest > this x (mean + 1) running requests "
        "(AIBRIX_PREFIX_CACHE_LOAD_IMBALANCE_FACTOR) ...",
    )
    imbalance_min_gap: int = Field(
        8, ge=0, description="... and busiest - least >= this (..._LOAD_IMBALANCE_MIN_GAP)."
    )
    std_factor: float = Field(
        1.0,
        ge=0,
        description="A matched instance qualifies with requests <= mean + this x std "
        "(AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR).",
    )
    seed: int = Field(0, description="Seed of the shuffle that orders tied matches.")


@register
class AIBrixPrefixCache(SeededColocatingPolicy):
    name = "aibrix_prefix_cache"
    uses_tier_view = False  # routes on the HBM hit alone
    Params = AIBrixParams
    description = (
        "AIBrix prefix-cache: a load gate, then the best match among instances within mean + "
        "1 std of running requests, else the least loaded."
    )

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: AIBrixParams = self.params  # type: ignore[assignment]
        n = len(fleet.instances)
        loads = [i.num_requests for i in candidates]
        mean = sum(loads) / len(loads)
        least = argmin(candidates, lambda i: (i.num_requests,), self.tie, n)
        allowed: Sequence[InstanceView] = candidates
        lo, hi = min(loads), max(loads)
        if hi > p.imbalance_factor * (mean + 1) and hi - lo >= p.imbalance_min_gap:
            allowed = [i for i in candidates if i.num_requests == lo]
        cached = fleet.cached_tokens(request)
        bs = max(request.block_size, 1)
        blocks = max(request.input_tokens // bs, 1)
        # AIBrix's integer match percentage: matched blocks * 100 // prompt blocks
        percent = {i.index: (cached[i.index] // bs) * 100 // blocks for i in allowed}
        matched = [i for i in allowed if percent[i.index] > 0]
        if not matched:
            return least, "least_request_fallback", percent
        self._rng.shuffle(matched)  # ties in a random order, as AIBrix shuffles first
        matched.sort(key=lambda i: (-percent[i.index], i.num_requests))  # stable
        bound = mean + p.std_factor * statistics.pstdev(loads)
        for i in matched:
            if i.num_requests <= bound:
                return i, "prefix_match", percent
        return least, "prefix_match_skipped", percent


class ProductionStackParams(StrictParams):
    seed: int = Field(0, description="Seed of the random choice among the longest matches.")


@register
class ProductionStackPrefix(SeededColocatingPolicy):
    name = "production_stack_prefix"
    uses_tier_view = False  # routes on the HBM hit alone
    Params = ProductionStackParams
    description = (
        "vLLM production-stack prefixaware: a random instance among those with the longest "
        "prefix match (all when none matches); no load term."
    )

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        cached = fleet.cached_tokens(request)
        best = max(cached[i.index] for i in candidates)
        longest = [i for i in candidates if cached[i.index] == best]
        pick = longest[self._rng.randrange(len(longest))]
        reason = "longest_match" if best > 0 else "no_match"
        return pick, reason, {i.index: cached[i.index] for i in candidates}
