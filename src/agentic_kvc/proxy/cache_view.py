"""The proxy's side of prefix-cache views: block hashes of each prompt, and the index to use.

The hashing and the estimated index themselves live in `agentic_kvc.cache` (shared with the
simulator). This module only adapts them to the proxy: it picks the view named by
`--cache-view`, and re-creates hasher and index when the engine's block size becomes known
(router hashes must cut blocks where the engine does, or no prefix ever matches).

Short sessionless prompts are hashed here in plain Python (`ProxyBlockHasher`), with the same
keys: the numpy path costs ~20 numpy calls whatever the length, which is cheap in a loop but
costs ~65 us per request in the proxy, where each request starts with cold caches (measured
with `benchmarks/proxy_cpu.py --ablate`, docs/proxy.md "Overhead").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentic_kvc.cache import hashing
from agentic_kvc.cache.hashing import SessionBlockHasher
from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex

# The router hash's constants (cache/hashing.py), as Python ints for the scalar path below.
_M64 = (1 << 64) - 1
_I64 = 1 << 63
_K1, _K2 = int(hashing._K1), int(hashing._K2)
_P1, _P2 = int(hashing._P[0]), int(hashing._P[1])
_B1, _B2 = hashing._B
_HIGH = 64 - hashing._LANE_BITS
_LOW = (1 << hashing._LANE_BITS) - 1

# Up to this many tokens the scalar path is the faster one. Hot in a loop, the two cost the
# same at ~48 tokens (13 us each at 32); in the proxy the numpy path costs about 3x its hot
# time (cold caches between requests) and the scalar one grows by ~0.4 us a token.
SCALAR_MAX_TOKENS = 64


def scalar_block_hashes(tokens: Sequence[int], block_size: int) -> list[int] | None:
    """`hashing.block_hashes(tokens, block_size)` in plain Python (the same keys), or None
    when an element is not an int in int64 range (the numpy path then raises its error)."""
    n = len(tokens) // block_size * block_size
    keys: list[int] = []
    h1 = h2 = 0
    for start in range(0, n, block_size):
        for t in tokens[start : start + block_size]:
            if type(t) is not int or not -_I64 <= t < _I64:
                return None
            # hashing._mix_into: int64 -> uint64 (negatives wrap), odd multiply, xor-shift,
            # odd multiply; then each lane's 28-bit digit + 1, folded in by Horner's rule.
            z = (t & _M64) * _K1 & _M64
            z = (z ^ (z >> 29)) * _K2 & _M64
            h1 = (h1 * _B1 + (z >> _HIGH) + 1) % _P1
            h2 = (h2 * _B2 + (z & _LOW) + 1) % _P2
        keys.append(h1 << 31 | h2)
    return keys


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
