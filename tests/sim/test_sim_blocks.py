"""The block pool's prefix cache: LRU order of free blocks, tail-first frees, touches.

`BlockPool` keeps blocks as runs (pieces); `block_pool_ref.BlockPool` is the per-block model it
replaced. The property test drives both with the same random requests (shared prefixes, capped
lookups that re-cache held content, partial hits, growth, frees in any order) and compares
everything the engine can observe after every operation.
"""

from __future__ import annotations

from collections.abc import Callable

import block_pool_ref
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.sim.blocks import BlockPool, BlockTable


def slicer(chain: list[int]) -> Callable[[int, int], list[int]]:
    return lambda lo, hi: chain[lo:hi]


def fill(pool: BlockPool, hashes: list[int], n_blocks: int | None = None) -> BlockTable:
    """A request that allocates `n_blocks` (default: one per hash) and caches its hashes."""
    table = BlockTable()
    pool.allocate(table, len(hashes) if n_blocks is None else n_blocks)
    pool.cache(table, len(hashes), slicer(hashes))
    return table


def test_free_blocks_are_evicted_least_recently_freed_first_and_tail_first() -> None:
    pool = BlockPool(num_blocks=4, block_size=16)
    a = fill(pool, [100, 101])
    b = fill(pool, [200, 201])
    pool.release(a)  # freed first: evicted first, its tail (hash 101) before its head
    pool.release(b)
    assert pool.num_free == 4 and pool.usage == 0.0
    pool.allocate(BlockTable(), 1)
    assert 101 not in pool.cached and 100 in pool.cached
    pool.allocate(BlockTable(), 1)
    assert 100 not in pool.cached and {200, 201} <= set(pool.cached)
    assert pool.evictions == 2


def test_touching_a_free_cached_block_protects_it_from_eviction() -> None:
    pool = BlockPool(num_blocks=3, block_size=16)
    pool.release(fill(pool, [0, 1, 2]))  # queue: block 2, 1, 0 (tail first)
    hit = pool.lookup([0, 1, 2], 1)
    assert hit.n == 1 and pool.evictable(hit) == 1
    pool.take(BlockTable(), hit)  # block 0 in use again: its piece was split
    assert pool.num_free == 2
    pool.allocate(BlockTable(), 2)
    assert set(pool.cached) == {0}
    assert pool.count_hit([0, 1]) == 1


def test_count_hit_finds_the_cached_prefix_and_respects_the_cap() -> None:
    pool = BlockPool(num_blocks=64, block_size=16)
    fill(pool, list(range(37)), n_blocks=40)
    chain = list(range(40))
    for cap in (None, 0, 1, 36, 37, 39):
        want = 37 if cap is None else min(cap, 37)
        assert pool.count_hit(chain, cap) == want
        assert pool.lookup(chain, cap).n == want
    assert pool.count_hit([99, *range(1, 37)]) == 0


def test_a_hash_stays_cached_while_any_block_holds_it() -> None:
    pool = BlockPool(num_blocks=3, block_size=16)
    a = fill(pool, [5])
    b = fill(pool, [5])  # the same content prefilled twice at once
    pool.release(a)
    pool.allocate(BlockTable(), 2)  # evicts a (and the never-used third block)
    assert pool.count_hit([5]) == 1 and pool.cached[5] is b.pieces[0]
    pool.release(b)
    pool.allocate(BlockTable(), 1)
    assert pool.count_hit([5]) == 0 and not pool.dups


def test_never_used_blocks_go_before_freed_cached_ones() -> None:
    pool = BlockPool(num_blocks=4, block_size=16)
    pool.release(fill(pool, [42]))
    assert pool.num_free == 4
    pool.allocate(BlockTable(), 3)  # the queue's head: blocks never used
    assert pool.count_hit([42]) == 1
    pool.allocate(BlockTable(), 1)
    assert pool.count_hit([42]) == 0


class Pair:
    """The run-based pool and the per-block reference, driven in lockstep."""

    def __init__(self, num_blocks: int) -> None:
        self.new = BlockPool(num_blocks, 1)
        self.ref = block_pool_ref.BlockPool(num_blocks, 1)
        self.tables: dict[int, BlockTable] = {}
        self.blocks: dict[int, list[int]] = {}
        self.n_cached: dict[int, int] = {}
        self.src: dict[int, Callable[[int, int], list[int]]] = {}

    def check(self, chains: list[list[int]]) -> None:
        new, ref = self.new, self.ref
        assert new.num_free == ref.num_free
        assert new.evictions == ref.evictions
        assert set(new.cached) == set(ref.cached)
        assert set(new.dups) == set(ref.dups)
        assert {h: len(v) for h, v in new.dups.items()} == {h: len(v) for h, v in ref.dups.items()}
        for c in chains:
            assert new.count_hit(c) == ref.count_hit(c)
        for r, table in self.tables.items():
            assert len(table) == len(self.blocks[r])

    def admit(self, r: int, chain: list[int], cap: int, extra: int) -> None:
        """Look up at most `cap` blocks, take the hit, allocate the rest plus `extra`."""
        hit = self.new.lookup(chain, cap)
        ids = self.ref.longest_hit(chain, cap)
        assert hit.n == len(ids)
        assert self.new.evictable(hit) == self.ref.evictable(ids) if ids else True
        need = len(chain) - hit.n + extra
        if need + self.ref.evictable(ids) > self.ref.num_free:
            return
        table = BlockTable()
        if hit.n:
            self.new.take(table, hit)
        self.ref.touch(ids)
        self.new.allocate(table, need)
        self.tables[r], self.blocks[r] = table, ids + self.ref.allocate(need)
        self.n_cached[r] = hit.n
        # One hash source per chain, kept across admissions: a preempted request re-admitted
        # extends its own pieces.
        self.src.setdefault(r, slicer(chain))

    def cache(self, r: int, chain: list[int], upto: int) -> None:
        full = min(upto, len(chain), len(self.blocks[r]))
        start = self.n_cached[r]
        if full <= start:
            return
        self.new.cache(self.tables[r], full, self.src[r])
        self.ref.cache(self.blocks[r][start:full], chain[start:full])
        self.n_cached[r] = full

    def grow(self, r: int, n: int) -> None:
        if n <= self.ref.num_free:
            self.new.allocate(self.tables[r], n)
            self.blocks[r].extend(self.ref.allocate(n))

    def release(self, r: int, first: bool = False) -> None:
        if first:  # to the head of the free queue (finished sessions first, demotion)
            self.new.release_first(self.tables.pop(r))
            self.ref.release_first(self.blocks.pop(r))
        else:
            self.new.release(self.tables.pop(r))
            self.ref.release(self.blocks.pop(r))
        del self.n_cached[r]


@st.composite
def chain_sets(draw: st.DrawFn) -> list[list[int]]:
    """Chains that share prefixes: each extends a prefix of an earlier one (a session's turns,
    a shared system prompt), with hashes standing for whole prefixes."""
    chains: list[list[int]] = []
    nodes: dict[tuple[int, int], int] = {}
    for _ in range(draw(st.integers(2, 7))):
        base = draw(st.sampled_from(chains)) if chains and draw(st.booleans()) else []
        keep = draw(st.integers(0, len(base)))
        chain = base[:keep]
        for _ in range(draw(st.integers(1, 9))):
            label = draw(st.integers(0, 2))  # few labels: different requests reach equal nodes
            parent = chain[-1] if chain else 0
            chain.append(nodes.setdefault((parent, label), len(nodes) + 1))
        chains.append(chain)
    return chains


@settings(max_examples=300, deadline=None)
@given(data=st.data(), chains=chain_sets(), num_blocks=st.integers(4, 40))
def test_runs_pool_matches_the_per_block_model(
    data: st.DataObject, chains: list[list[int]], num_blocks: int
) -> None:
    pair = Pair(num_blocks)
    which = st.integers(0, len(chains) - 1)
    for _ in range(data.draw(st.integers(1, 40))):
        op = data.draw(
            st.sampled_from(["admit", "admit", "cache", "grow", "release", "release_first"])
        )
        held = sorted(pair.tables)
        if op == "admit":
            r = data.draw(which)
            if r in pair.tables:
                continue
            chain = chains[r]
            cap = data.draw(st.integers(0, len(chain)))
            pair.admit(r, chain, cap, data.draw(st.integers(0, 2)))
        elif not held:
            continue
        elif op == "cache":
            r = data.draw(st.sampled_from(held))
            pair.cache(r, chains[r], data.draw(st.integers(0, len(chains[r]))))
        elif op == "grow":
            pair.grow(data.draw(st.sampled_from(held)), data.draw(st.integers(1, 3)))
        else:
            pair.release(data.draw(st.sampled_from(held)), first=op == "release_first")
        pair.check(chains)


def test_a_prefix_released_first_leaves_a_hole_the_pool_walks_and_recomputes() -> None:
    """`release_first` puts a shared prefix ahead of an older continuation, so an allocation
    can reuse the prefix while the continuation stays cached (a hole). Recomputing the chain
    then hashes blocks the continuation still holds: both pools must hold them twice, and a
    lookup must stop at the hole, as vLLM's walk does. (Found by finished-sessions-first runs
    on the Mooncake trace: the by-piece pool assumed a prefix-closed cache.)"""
    a, b, c = [1, 2, 3, 4], [1, 2, 5], [9, 10, 11, 12]
    pair = Pair(7)
    pair.admit(0, a, 4, 0)  # 4 fresh blocks
    pair.cache(0, a, 4)
    pair.release(0)  # queue: a's [1 2 3 4]
    pair.admit(1, b, 3, 0)  # hits [1 2]; one fresh block
    pair.cache(1, b, 3)
    pair.release(1, first=True)  # queue: [5] [1 2], then the continuation [3 4]
    pair.admit(2, c, 4, 0)  # the last 2 fresh, then [5] and 2 (from [1 2]'s tail)
    pair.cache(2, c, 4)
    assert pair.new.count_hit(a) == pair.ref.count_hit(a) == 1  # 1, then the hole at 2
    pair.release(2, first=True)  # queue: c's four, [1], [3 4]
    pair.check([a, b, c])
    pair.admit(3, a, 4, 0)  # hits [1]; 3 of c's blocks
    pair.cache(3, a, 4)  # hashes 3 and 4 are now held twice
    assert set(pair.ref.dups) == {3, 4}
    pair.check([a, b, c])
    pair.release(3)
    pair.admit(4, c, 4, 0)
    pair.check([a, b, c])


def test_a_prompt_that_leaves_a_piece_where_another_starts_takes_only_its_part() -> None:
    """Past a hole, a piece can hold a prompt's prefix and then leave it (a branch) at the
    position where another cached piece continues it. The hit's group for the first piece must
    end there, or the request takes the whole piece and the block after the branch is held
    twice and never freed. (Found by the property test above, 2026-12-02.)"""
    a, b = [1, 2, 3, 4, 5, 6, 7], [1, 9]
    pair = Pair(8)
    pair.admit(0, a, 0, 0)
    pair.cache(0, a, 2)  # [1 2] cached
    pair.release(0)
    pair.admit(2, b, 1, 0)  # hits [1]
    pair.release(2, first=True)  # its [1] goes to the head of the queue: a hole before [2]
    pair.admit(2, b, 0, 0)  # reuses the head: [1] leaves the cache while [2] stays
    pair.cache(2, b, 2)  # recomputed as [1 9]: one piece, branching from a at position 1
    hit = pair.new.lookup(a, 2)
    assert hit.n == 2 and hit.groups == [(0, 1), (1, 2)]
    pair.admit(0, a, 2, 0)  # hits [1] of b's piece, then the [2] piece
    pair.check([a, b])
    pair.release(2)  # b's block 9 is free again; its block 1 stays with a
    pair.check([a, b])
    assert pair.new.num_free == 1
