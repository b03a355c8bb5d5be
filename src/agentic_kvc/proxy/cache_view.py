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

from agentic_kvc.cache.hashing import SCALAR_MAX_TOKENS, SessionBlockHasher, scalar_block_hashes
from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex


class ProxyBlockHasher(SessionBlockHasher):
    """`SessionBlockHasher` with the scalar path for short sessionless token lists.

    A session's prompts go through the parent, whose memo lets the next turn reuse this one's
    blocks; a sessionless prompt has nothing to memoise."""

    def hash(self, session_id: str | None, tokens: Sequence[int] | np.ndarray) -> list[int]:
        if session_id is None and type(tokens) is list and len(tokens) <= SCALAR_MAX_TOKENS:
            keys = scalar_block_hashes(tokens, self.block_size)
            if keys is not None:
                self.hashed_blocks += len(keys)
                return keys
        return super().hash(session_id, tokens)


def make_hasher(block_size: int) -> SessionBlockHasher:
    return ProxyBlockHasher(block_size)


def make_estimated_index(
    n_instances: int, capacity_blocks: int | None = None
) -> EstimatedPrefixIndex:
    """The router's estimate; capacity is the engine's KV blocks (cache_config_info) if known."""
    return EstimatedPrefixIndex(n_instances, capacity_blocks=capacity_blocks)
