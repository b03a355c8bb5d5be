"""The estimated prefix index (LRU + TTL, binary-searched) and the explicit block index."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.cache.hashing import block_hashes
from agentic_kvc.cache.prefix_index import BlockIndex, EstimatedPrefixIndex
from agentic_kvc.policy import RequestView


def rv(hashes: list[int], bs: int = 16) -> RequestView:
    return RequestView("r", "s", 1, len(hashes) * bs, 1, block_hashes=hashes, block_size=bs)


def chain(*parts: list[int]) -> list[int]:
    """Block keys of a prompt made by concatenating token lists (16 tokens per block)."""
    return block_hashes([t for p in parts for t in p], 16)


SYS = list(range(64))  # 4 blocks shared by everyone
A = list(range(1000, 1064))
B = list(range(2000, 2064))


def test_record_and_match_per_instance() -> None:
    idx = EstimatedPrefixIndex(3)
    idx.record(0, chain(SYS, A), now=0)
    idx.record(2, chain(SYS), now=0)
    assert idx.matched_tokens(rv(chain(SYS, A)), 3) == [128, 0, 64]
    assert idx.matched_tokens(rv(chain(SYS, B)), 3) == [64, 0, 64]
    assert idx.matched_tokens(rv(chain(B)), 3) == [0, 0, 0]
    assert idx.matched_tokens(rv(chain(SYS, A)), 5) == [128, 0, 64, 0, 0]  # grows as asked
    assert idx.matched_tokens(rv([]), 2) == [0, 0]


def test_capacity_evicts_tails_first() -> None:
    idx = EstimatedPrefixIndex(1, capacity_blocks=10)
    idx.record(0, chain(SYS, A), now=0)  # 8 blocks
    idx.record(0, chain(SYS, B), now=1)  # 4 new blocks -> 12 > 10: drop A's last two
    assert idx.blocks(0) == 10
    assert idx.matched_tokens(rv(chain(SYS, A)), 1) == [6 * 16]
    assert idx.matched_tokens(rv(chain(SYS, B)), 1) == [128]


def test_ttl_expires_untouched_prefixes() -> None:
    idx = EstimatedPrefixIndex(1, ttl_s=120)
    idx.record(0, chain(SYS, A), now=0)
    idx.record(0, chain(SYS, B), now=100)  # refreshes SYS only
    idx.advance(150)
    assert idx.matched_tokens(rv(chain(SYS, A)), 1) == [64]
    assert idx.matched_tokens(rv(chain(SYS, B)), 1) == [128]
    idx.advance(221)
    assert idx.matched_tokens(rv(chain(SYS, B)), 1) == [0]
    idx.advance(0)  # time never goes back
    assert idx.matched_tokens(rv(chain(SYS, B)), 1) == [0]
    assert idx.blocks(0) == 0


def test_clear_and_bad_arguments() -> None:
    idx = EstimatedPrefixIndex(2)
    idx.record(1, chain(SYS), now=0)
    idx.clear(1)
    assert idx.matched_tokens(rv(chain(SYS)), 2) == [0, 0]
    with pytest.raises(ValueError, match="capacity_blocks"):
        EstimatedPrefixIndex(1, capacity_blocks=0)
    with pytest.raises(ValueError, match="ttl_s"):
        EstimatedPrefixIndex(1, ttl_s=0)
    with pytest.raises(IndexError):
        idx.record(-1, [], now=0)


# A brute-force model: the index's own membership, walked linearly from the head. The
# binary search must agree with it, which holds only if every instance's set stays
# prefix-closed under capacity eviction and TTL (the property the class relies on).
prompts = st.lists(st.integers(0, 3), min_size=1, max_size=12)  # a path in a small tree


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(st.tuples(st.integers(0, 2), prompts, st.floats(0, 5)), max_size=25),
    probe=prompts,
    cap=st.none() | st.integers(1, 20),
    ttl=st.none() | st.floats(1, 20),
)
def test_binary_search_equals_linear_walk(ops, probe, cap, ttl) -> None:
    idx = EstimatedPrefixIndex(3, capacity_blocks=cap, ttl_s=ttl)
    now = 0.0
    for inst, path, dt in ops:
        now += dt
        idx.record(inst, block_hashes(path, 1), now)
    idx.advance(now + 1)
    keys = block_hashes(probe, 1)
    cutoff = idx._cutoff()
    want = []
    for i in range(3):
        lru = dict(idx.lru(i))
        m = 0
        while m < len(keys) and keys[m] in lru and lru[keys[m]] >= cutoff:
            m += 1
        want.append(m)
    assert idx.matched_blocks(keys, 3) == want
    if cap is not None:
        assert all(len(idx.lru(i)) <= cap for i in range(3))


def test_block_index_explicit_updates() -> None:
    idx = BlockIndex()
    a, b = chain(SYS, A), chain(SYS, B)
    idx.add(0, a)
    idx.add(1, b)
    idx.add(1, b)  # idempotent
    assert idx.blocks(1) == 8
    assert idx.holders(a[0]) == [0, 1]
    assert idx.matched_tokens(rv(a), 3) == [128, 64, 0]
    idx.remove(0, a[2:3])  # a hole: matching stops there, as in vLLM
    assert idx.matched_tokens(rv(a), 2) == [32, 64]
    idx.clear(1)
    assert idx.holders(a[0]) == [0]
    assert idx.matched_tokens(rv(b), 2) == [32, 0]  # the hole is in the shared prefix
    idx.remove(1, a)  # removing what is not held is a no-op
    assert idx.blocks(1) == 0


@settings(max_examples=100, deadline=None)
@given(
    held=st.lists(st.sets(st.integers(0, 9)), min_size=1, max_size=5),
    probe=st.lists(st.integers(0, 9), max_size=10),
)
def test_block_index_matches_per_instance_walk(held, probe) -> None:
    idx = BlockIndex(len(held))
    for i, s in enumerate(held):
        idx.add(i, s)
    want = []
    for s in held:
        m = 0
        while m < len(probe) and probe[m] in s:
            m += 1
        want.append(m)
    assert idx.matched_blocks(probe, len(held)) == want


class _PerBlockLRU:
    """The plain model the index's runs stand for: one OrderedDict per instance, each record
    moving its blocks to the end tail first, then evicting from the front (capacity, TTL)."""

    def __init__(self, n: int, cap: int | None, ttl: float | None) -> None:
        self.lru: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(n)]
        self.cap, self.ttl, self.now = cap, ttl, float("-inf")

    def record(self, instance: int, hashes: list[int], now: float) -> None:
        self.now = max(self.now, now)
        lru = self.lru[instance]
        for h in reversed(hashes):
            lru.pop(h, None)
            lru[h] = self.now
        self.evict(instance)

    def evict(self, instance: int) -> None:
        lru = self.lru[instance]
        while self.cap is not None and len(lru) > self.cap:
            lru.popitem(last=False)
        cutoff = float("-inf") if self.ttl is None else self.now - self.ttl
        while lru and next(iter(lru.values())) < cutoff:
            lru.popitem(last=False)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 1), st.lists(st.integers(0, 6), max_size=10), st.floats(0, 5)),
        max_size=40,
    ),
    cap=st.none() | st.integers(1, 12),
    ttl=st.none() | st.floats(1, 20),
)
def test_runs_keep_the_per_block_lru_order(ops, cap, ttl) -> None:
    """Same blocks, same LRU order, same times as a per-block LRU, after every record (raw
    hash lists here, repeats included, so stale copies and duplicates are exercised)."""
    idx = EstimatedPrefixIndex(2, capacity_blocks=cap, ttl_s=ttl)
    model = _PerBlockLRU(2, cap, ttl)
    now = 0.0
    for inst, hashes, dt in ops:
        now += dt
        idx.record(inst, hashes, now)
        model.record(inst, hashes, now)
        assert idx.lru(inst) == list(model.lru[inst].items())
    for inst in range(2):
        model.evict(inst)
        assert idx.blocks(inst) == len(model.lru[inst])
        assert idx.lru(inst) == list(model.lru[inst].items())


def test_stale_entries_are_compacted() -> None:
    idx = EstimatedPrefixIndex(1)
    prompt = list(range(1000))
    for t in range(50):  # the same prompt again and again: every earlier copy goes stale
        idx.record(0, prompt, now=t)
    assert idx._entries[0] <= 4 * 1000 + 4096
    assert idx.lru(0) == [(h, 49.0) for h in reversed(prompt)]
