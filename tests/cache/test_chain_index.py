"""`ChainedPrefixIndex` (segments of chains) answers what `EstimatedPrefixIndex` answers.

Random workloads of chained prompts (paths in a small tree of blocks, so prompts share heads
at every depth, as a session's turns and a shared system prompt do), several instances, a
capacity and a TTL: after every record, the same held blocks in the same LRU order with the
same touch times, and the same matches for every prompt, on every instance.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.cache.chain_index import ChainedPrefixIndex
from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex
from agentic_kvc.policy import RequestView

paths = st.lists(st.integers(0, 2), min_size=0, max_size=14)  # a path in a small tree


def block_hashes(path: list[int], _bs: int = 1) -> list[int]:
    """Chained keys: key j stands for the whole path up to j, its length included (the
    router's polynomial hash is not usable here: a leading token 0 adds nothing to it)."""
    return [hash(tuple(path[: j + 1])) for j in range(len(path))]


def rv(hashes: list[int]) -> RequestView:
    return RequestView("r", "s", 1, len(hashes), 1, block_hashes=hashes, block_size=1)


def both(ref: EstimatedPrefixIndex, new: ChainedPrefixIndex, demote: bool, *args: object) -> None:
    """The same `record` (or `demote`) on the per-hash index and the chained one."""
    for idx in (ref, new):
        (idx.demote if demote else idx.record)(*args)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 2), paths, st.floats(0, 5), st.integers(0, 3)), max_size=40
    ),
    probes=st.lists(paths, min_size=1, max_size=4),
    cap=st.none() | st.integers(1, 24),
    ttl=st.none() | st.floats(1, 20),
)
def test_segments_answer_as_the_per_hash_index(ops, probes, cap, ttl) -> None:
    """... with a prompt now and then demoted to the LRU's front (`demote`: finished
    sessions first, pause-aware demotion), which can leave holes."""
    ref = EstimatedPrefixIndex(3, capacity_blocks=cap, ttl_s=ttl)
    new = ChainedPrefixIndex(3, capacity_blocks=cap, ttl_s=ttl)
    keys = [block_hashes(p, 1) for p in probes]
    now = 0.0
    for inst, path, dt, op in ops:
        now += dt
        hashes = block_hashes(path, 1)
        both(ref, new, op == 0, inst, hashes, now)
        assert new.lru(inst) == ref.lru(inst)
        assert new.blocks(inst) == ref.blocks(inst)
        for k in [hashes, *keys]:
            assert new.matched_blocks(k, 3) == ref.matched_blocks(k, 3)
            assert new.matched_tokens_at(rv(k), inst) == ref.matched_tokens_at(rv(k), inst)
    now += 3
    ref.advance(now)
    new.advance(now)
    for k in keys:
        assert new.matched_tokens(rv(k), 4) == ref.matched_tokens(rv(k), 4)
    for inst in range(3):
        assert new.blocks(inst) == ref.blocks(inst)
        assert new.lru(inst) == ref.lru(inst)


def test_memory_stays_proportional_to_what_is_held() -> None:
    idx = ChainedPrefixIndex(1, capacity_blocks=500)
    prompt = block_hashes(list(range(3000)), 1)
    for t in range(60):  # growing turns of one session, and a capacity well below them
        idx.record(0, prompt[: 1000 + 30 * t], now=t)
    assert idx.blocks(0) == 500
    assert idx._refs[0] <= 4 * 500 + 4096
    assert len(idx._heads[0]) == 1
    assert [h for h, _t in idx.lru(0)] == list(reversed(prompt[:500]))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="capacity_blocks"):
        ChainedPrefixIndex(1, capacity_blocks=0)
    with pytest.raises(ValueError, match="ttl_s"):
        ChainedPrefixIndex(1, ttl_s=0)
    with pytest.raises(IndexError):
        ChainedPrefixIndex(1).record(-1, [], now=0)


def fleet_maps(idx: ChainedPrefixIndex) -> tuple[dict, dict]:
    """What the fleet-wide maps must hold, rebuilt from the per-instance heads."""
    groups: dict[int, dict[int, object]] = {}
    where: dict[int, set[int]] = {}
    for i, heads in enumerate(idx._heads):
        for h, r in heads.items():
            where.setdefault(h, set()).add(i)
            if r.a == 0:
                groups.setdefault(h, {})[i] = r
    return groups, where


def assert_fleet_maps(idx: ChainedPrefixIndex) -> None:
    """The fleet-wide maps hold what the per-instance heads imply."""
    groups, where = fleet_maps(idx)
    assert {h: set(s) for h, s in idx._where.items()} == where
    assert {
        h: {i: r for m in g.by_c.values() for i, r in m.items()} for h, g in idx._groups.items()
    } == groups


shared = st.lists(st.integers(0, 1), min_size=0, max_size=6)  # a system prompt


@settings(max_examples=300, deadline=None)
@given(
    system=shared,
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.booleans(), paths, st.floats(0, 5), st.integers(0, 5)),
        max_size=50,
    ),
    probes=st.lists(paths, min_size=1, max_size=4),
    cap=st.none() | st.integers(1, 30),
    ttl=st.none() | st.floats(1, 20),
)
def test_one_pass_match_answers_as_a_probe_per_instance(system, ops, probes, cap, ttl) -> None:
    """The fleet-wide `matched_blocks` against a probe per instance (`_matched_each`) and
    against `EstimatedPrefixIndex`, on 6 instances whose prompts mostly share a system
    prompt, with LRU eviction, TTL expiry, demotions and instances cleared; the fleet-wide maps stay
    those the per-instance heads imply."""
    n = 6
    ref = EstimatedPrefixIndex(n, capacity_blocks=cap, ttl_s=ttl)
    new = ChainedPrefixIndex(n, capacity_blocks=cap, ttl_s=ttl)
    keys = [block_hashes(system + p) for p in probes] + [block_hashes(system)]
    now = 0.0
    for inst, with_system, path, dt, op in ops:
        now += dt
        if op == 0 and dt < 2.5:  # now and then an instance restarts
            ref.clear(inst)
            new.clear(inst)
            continue
        hashes = block_hashes((system if with_system else []) + path)
        both(ref, new, op == 1, inst, hashes, now)  # op 1: demoted to the LRU's front
        assert_fleet_maps(new)
        for k in [hashes, *keys]:
            got = new.matched_blocks(k, n)
            assert got == new._matched_each(k, n) == ref.matched_blocks(k, n)
            assert new.matched_blocks(k, n + 2) == ref.matched_blocks(k, n + 2)
            assert new.matched_blocks(k, 2) == ref.matched_blocks(k, 2)
    for dt in (1.0, 5.0, 30.0):  # TTL expiry without records (blocks held at match time)
        now += dt
        ref.advance(now)
        new.advance(now)
        for k in keys:
            assert new.matched_blocks(k, n) == new._matched_each(k, n) == ref.matched_blocks(k, n)


def test_demote_leaves_a_hole_that_both_indexes_walk_to() -> None:
    """Hand-built: session B extends prompt A = [a0, a1]; A is demoted to the LRU's front and
    one new block evicts a1, its tail: B's continuation is still held after a block that is
    not. Both indexes then match B to its first miss (1 block, not 6), and a record of B again
    holds each of its blocks once (so the capacity evicts one block, X's tail, not more)."""
    x = block_hashes([3, 3])
    a = block_hashes([0, 0])
    b = block_hashes([0, 0, 1, 1, 1, 1])
    c = block_hashes([2])
    for idx in (
        EstimatedPrefixIndex(1, capacity_blocks=8),
        ChainedPrefixIndex(1, capacity_blocks=8),
    ):
        idx.record(0, x, now=0.5)
        idx.record(0, b, now=1.0)
        idx.demote(0, a, now=2.0)
        assert [h for h, _t in idx.lru(0)] == [a[1], a[0], *reversed(x), *reversed(b[2:])]
        assert {t for _h, t in idx.lru(0)} == {0.5, 1.0}
        assert [t for _h, t in idx.lru(0)][:2] == [0.5, 0.5]  # as old as the oldest held
        idx.record(0, c, now=3.0)  # 9 blocks for 8: the demoted tail goes first
        assert [h for h, _t in idx.lru(0)] == [a[0], *reversed(x), *reversed(b[2:]), c[0]]
        assert idx.matched_blocks(b, 1) == [1]
        assert idx.matched_tokens_at(rv(b), 0) == 1
        idx.record(0, b, now=4.0)  # a1 recomputed, b2.. refreshed: 9 blocks, X's tail goes
        assert idx.blocks(0) == 8
        assert [h for h, _t in idx.lru(0)] == [x[0], c[0], *reversed(b)]
        assert idx.matched_blocks(b, 1) == [6]


def test_demote_of_what_is_not_held_changes_nothing() -> None:
    for idx in (
        EstimatedPrefixIndex(2, capacity_blocks=8),
        ChainedPrefixIndex(2, capacity_blocks=8),
    ):
        idx.record(0, block_hashes([0, 1]), now=1.0)
        before = idx.lru(0)
        idx.demote(0, block_hashes([1, 1]), now=2.0)
        idx.demote(1, block_hashes([0, 1]), now=2.0)
        assert idx.lru(0) == before
        assert idx.lru(1) == []


BASES = ([0] * 12, [0] * 4 + [1] * 8, [0] * 2 + [2] * 10)  # chains sharing heads


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.integers(0, len(BASES) - 1),
            st.integers(1, 12),
            st.floats(0, 5),
            st.integers(0, 2),
        ),
        min_size=8,
        max_size=40,
    ),
    cap=st.integers(2, 16),
    ttl=st.none() | st.floats(5, 40),
)
def test_demotions_answer_as_the_per_hash_index(ops, cap, ttl) -> None:
    """Prompts that are prefixes of a few chains sharing their heads (a session's growing
    turns, sessions with a common system prompt), a third of them demoted to the LRU's front:
    the demoted prefix goes first while longer prompts over it stay, so holes are common.
    Both indexes hold the same blocks in the same order and match every prefix alike."""
    ref = EstimatedPrefixIndex(3, capacity_blocks=cap, ttl_s=ttl)
    new = ChainedPrefixIndex(3, capacity_blocks=cap, ttl_s=ttl)
    keys = [block_hashes(base[:k]) for base in BASES for k in range(1, 13)]
    now = 0.0
    for inst, base, k, dt, op in ops:
        now += dt
        hashes = block_hashes(BASES[base][:k])
        both(ref, new, op == 0, inst, hashes, now)
        assert new.lru(inst) == ref.lru(inst)
        assert new.blocks(inst) == ref.blocks(inst)
        for key in keys:
            got = new.matched_blocks(key, 3)
            assert got == new._matched_each(key, 3) == ref.matched_blocks(key, 3)
            assert new.matched_tokens_at(rv(key), inst) == ref.matched_tokens_at(rv(key), inst)
        assert_fleet_maps(new)
