"""The proxy's side of prefix-cache views: block hashes of each prompt, and the index to use.

The hashing and the estimated index themselves live in `agentic_kvc.cache` (shared with the
simulator). This module only adapts them to the proxy: it picks the view named by
`--cache-view`, and re-creates hasher and index when the engine's block size becomes known
(router hashes must cut blocks where the engine does, or no prefix ever matches).

Short sessionless prompts are hashed in plain Python (`ProxyBlockHasher`, with
`hashing.scalar_block_hashes`: the same keys): the numpy path costs ~20 numpy calls whatever
the length, which is cheap in a loop but was 6-10% of the proxy's CPU samples per relayed
32-token request on a real engine, where each request starts with cold caches (1% with the
scalar path; `benchmarks/proxy_cpu.py`, docs/proxy.md "Overhead").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentic_kvc.cache.chain_index import ChainedPrefixIndex
from agentic_kvc.cache.hashing import SCALAR_MAX_TOKENS, SessionBlockHasher, scalar_block_hashes
from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex
from agentic_kvc.cache.tier_index import TieredPrefixIndex
from agentic_kvc.cache.tier_store import walk_stores_at_free
from agentic_kvc.metrics.prometheus import EngineMetrics
from agentic_kvc.proxy.token_memo import DEFAULT_BUDGET_MIB


class ProxyBlockHasher(SessionBlockHasher):
    """`SessionBlockHasher` with the scalar path for short token lists.

    Longer prompts go through the parent, whose memo lets a session's next turn reuse this
    one's blocks. A short one (at most `SCALAR_MAX_TOKENS`, a few blocks) has little to reuse or
    to leave for the next turn, and the numpy path's fixed cost made a session's 32-token
    request take about twice a sessionless one's request path: it is hashed in plain Python and
    leaves the session's memo as it was (an agent's short side request, such as a title or a
    quota check, then does not replace its long conversation's memo)."""

    def hash(self, session_id: str | None, tokens: Sequence[int] | np.ndarray) -> list[int]:
        if type(tokens) is list and len(tokens) <= SCALAR_MAX_TOKENS:
            keys = scalar_block_hashes(tokens, self.block_size)
            if keys is not None:
                self.hashed_blocks += len(keys)
                return keys
        return super().hash(session_id, tokens)


def make_hasher(block_size: int, memo_mib: int = DEFAULT_BUDGET_MIB) -> SessionBlockHasher:
    """The proxy's hasher; its per-session memo holds at most `memo_mib` MiB."""
    return ProxyBlockHasher(block_size, budget_bytes=memo_mib << 20)


def make_estimated_index(
    n_instances: int, capacity_blocks: int | None = None, tiers: bool = False
) -> EstimatedPrefixIndex | ChainedPrefixIndex:
    """The router's estimate; capacity is the engine's KV blocks (cache_config_info) if known.
    With `tiers` (`--tier-view`) the chained form of the same estimate (the same answers), which
    `with_engine_tier` extends once an engine states its tier."""
    if tiers:
        return ChainedPrefixIndex(n_instances, capacity_blocks)
    return EstimatedPrefixIndex(n_instances, capacity_blocks=capacity_blocks)


def with_engine_tier(
    hbm: ChainedPrefixIndex, m: EngineMetrics, max_num_batched_tokens: int | None
) -> TieredPrefixIndex | None:
    """The HBM estimate `hbm` extended with the tier below HBM that an engine's metrics state
    (vLLM's SimpleCPUOffloadConnector: one tier per engine, host memory or a disk file of its
    own), as the simulator's router models it (cache/tier_index.py): fed at HBM eviction when
    the engine offloads lazily, at every routed prompt when it stores every computed block,
    and at both when the lazy walk covers the HBM pool (`walk_stores_at_free`, which needs the
    engines' max_num_batched_tokens). Every engine is taken to have the tier this one states
    (a fleet launched from one config). None when the metrics state no tier."""
    if not m.offload_blocks or m.offload_backend not in ("cpu", "disk"):
        return None
    n = hbm.n_instances
    write_through = m.offload_lazy is False
    store_at_free = (
        not write_through
        and max_num_batched_tokens is not None
        and m.block_size is not None
        and m.num_gpu_blocks is not None
        and walk_stores_at_free(max_num_batched_tokens, m.block_size, m.num_gpu_blocks)
    )
    on_disk = m.offload_backend == "disk"
    return TieredPrefixIndex(
        n,
        None,
        host_blocks=0 if on_disk else m.offload_blocks,
        disk_blocks=m.offload_blocks if on_disk else 0,
        disk_group=list(range(n)),  # a disk tier is a file per engine
        write_through=write_through,
        store_at_free=store_at_free,
        hbm=hbm,
    )
