"""The proxy's side of prefix-cache views: block hashes of each prompt, and the index to use.

The hashing and the estimated index themselves live in `agentic_kvc.cache` (shared with the
simulator). This module only adapts them to the proxy: it picks the view named by
`--cache-view`, and re-creates hasher and index when the engine's block size becomes known
(router hashes must cut blocks where the engine does, or no prefix ever matches).
"""

from __future__ import annotations

from agentic_kvc.cache.hashing import SessionBlockHasher
from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex


def make_hasher(block_size: int) -> SessionBlockHasher:
    return SessionBlockHasher(block_size)


def make_estimated_index(
    n_instances: int, capacity_blocks: int | None = None
) -> EstimatedPrefixIndex:
    """The router's estimate; capacity is the engine's KV blocks (cache_config_info) if known."""
    return EstimatedPrefixIndex(n_instances, capacity_blocks=capacity_blocks)
