"""`extend_block_hashes`: continuing the router's chain from a parent block's key gives the
keys a whole-prompt hash gives, which is what lets the exact view key KV-event blocks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.cache.hashing import block_hashes, extend_block_hashes

BS = 16


@settings(max_examples=40, deadline=None)
@given(
    a=st.integers(0, 12),
    b=st.integers(0, 12),
    extra=st.integers(0, 15),
    bs=st.sampled_from([1, 16, 32, 64]),
    seed=st.integers(0, 2**16),
)
def test_extended_keys_equal_whole_prompt_keys(
    a: int, b: int, extra: int, bs: int, seed: int
) -> None:
    tokens = np.random.default_rng(seed).integers(0, 150_000, (a + b) * bs + extra)
    head = block_hashes(tokens[: a * bs], bs)
    tail = extend_block_hashes(head[-1] if head else None, tokens[a * bs :], bs)
    assert head + tail == block_hashes(tokens, bs)


def test_a_different_parent_gives_different_keys() -> None:
    tokens = list(range(4 * BS))
    p1, p2 = block_hashes(list(range(100, 100 + BS)), BS)[0], block_hashes([7] * BS, BS)[0]
    assert set(extend_block_hashes(p1, tokens, BS)).isdisjoint(extend_block_hashes(p2, tokens, BS))
    with pytest.raises(ValueError, match="block_size"):
        extend_block_hashes(None, tokens, 0)
