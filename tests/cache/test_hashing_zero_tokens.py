"""Token id 0 counts: a leading block of zeros is not the empty chain (its key is not 0, the
start), and a prompt with it does not share keys with the same prompt without it."""

from __future__ import annotations

import numpy as np

from agentic_kvc.cache.hashing import block_hashes, extend_block_hashes


def test_a_block_of_token_zero_is_not_the_chain_start() -> None:
    bs = 16
    rest = np.arange(100, 100 + 2 * bs)
    with_zeros = block_hashes(np.concatenate([np.zeros(bs, dtype=np.int64), rest]), bs)
    without = block_hashes(rest, bs)
    assert with_zeros[0] != 0
    assert not set(with_zeros) & set(without)
    # The chain still continues from a key: hashing in two parts equals hashing at once.
    assert extend_block_hashes(with_zeros[0], rest, bs) == with_zeros[1:]
