"""The proxy's scalar block hash for short prompts gives exactly the shared numpy hash's keys."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.cache import hashing
from agentic_kvc.cache.hashing import (
    SCALAR_MAX_TOKENS,
    SessionBlockHasher,
    block_hashes,
    scalar_block_hashes,
)
from agentic_kvc.proxy.cache_view import ProxyBlockHasher, make_hasher

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SMALL = st.integers(min_value=0, max_value=300_000)  # real vocabularies


@settings(max_examples=400, deadline=None)
@given(
    tokens=st.lists(st.one_of(SMALL, INT64), max_size=SCALAR_MAX_TOKENS + 40),
    block_size=st.sampled_from([1, 2, 3, 7, 16, 32, 64]),
)
def test_scalar_keys_equal_the_numpy_keys(tokens: list[int], block_size: int) -> None:
    assert scalar_block_hashes(tokens, block_size) == block_hashes(tokens, block_size)


@pytest.mark.parametrize("token", [0, -1, 2**63 - 1, -(2**63), 1 << 28, (1 << 36) - 1])
def test_scalar_keys_at_the_edges(token: int) -> None:
    tokens = [token] * 48
    assert scalar_block_hashes(tokens, 16) == block_hashes(tokens, 16)


def test_out_of_range_or_non_int_ids_take_the_numpy_path_and_its_error() -> None:
    assert scalar_block_hashes([1, 2**63], 1) is None
    assert scalar_block_hashes([1, 2.5], 1) is None  # type: ignore[list-item]
    # True and 1.0 hash like 1: the digit table must not answer for them.
    assert scalar_block_hashes([1, 1], 1) is not None
    assert scalar_block_hashes([1, True], 1) is None
    assert scalar_block_hashes([1, 1.0], 1) is None  # type: ignore[list-item]
    h = make_hasher(1)
    with pytest.raises(OverflowError):
        h.hash(None, [1, 2**63])
    with pytest.raises((OverflowError, TypeError, ValueError)):
        h.hash(None, [1, "x"])  # type: ignore[list-item]


def test_a_full_digit_table_is_cleared_and_keys_stay_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hashing, "_DIGITS_MAX", 40)
    monkeypatch.setattr(hashing, "_DIGIT1", {})
    monkeypatch.setattr(hashing, "_DIGIT2", {})
    for first in range(0, 400, 17):  # 32 new ids a prompt: the table fills and clears
        tokens = list(range(first, first + 32))
        assert scalar_block_hashes(tokens, 16) == block_hashes(tokens, 16)
        assert len(hashing._DIGIT1) == len(hashing._DIGIT2) <= 40
    assert scalar_block_hashes([5, 2**63, 6, 7], 2) is None  # refused midway: nothing wrong kept
    assert scalar_block_hashes([5, 6, 7, 8], 2) == block_hashes([5, 6, 7, 8], 2)


@pytest.mark.parametrize("session", [None, "s"])
def test_short_prompts_skip_numpy(monkeypatch: pytest.MonkeyPatch, session: str | None) -> None:
    h = make_hasher(16)
    assert isinstance(h, ProxyBlockHasher)
    tokens = list(range(1000, 1000 + SCALAR_MAX_TOKENS))
    want = block_hashes(tokens, 16)

    def numpy_path(*_a: object) -> list[int]:
        raise AssertionError("numpy path used")

    monkeypatch.setattr(SessionBlockHasher, "hash", numpy_path)
    assert h.hash(session, tokens) == want
    assert h.hashed_blocks == len(want)


def test_long_prompts_and_arrays_keep_the_memoised_path() -> None:
    h, ref = make_hasher(16), SessionBlockHasher(16)
    turn1 = list(range(100))
    turn2 = turn1 + list(range(500, 540))
    for tokens in (turn1, turn2):
        assert h.hash("s", tokens) == ref.hash("s", tokens)
    assert h.reused_blocks == ref.reused_blocks == 6  # turn 2 reused turn 1's six blocks
    # A short side request of the session leaves its memo: the next long turn still reuses.
    assert h.hash("s", list(range(20))) == block_hashes(list(range(20)), 16)
    turn3 = turn2 + list(range(900, 950))
    assert h.hash("s", turn3) == block_hashes(turn3, 16)
    assert h.reused_blocks == 6 + 8  # all of turn 2's eight blocks
    long = list(range(SCALAR_MAX_TOKENS + 1))
    assert h.hash(None, long) == block_hashes(long, 16)
    arr = np.arange(32, dtype=np.int64)
    assert h.hash(None, arr) == block_hashes(arr, 16)
