"""The block pool's prefix cache: LRU order of free blocks, tail-first frees, touches."""

from __future__ import annotations

from agentic_kvc.sim.blocks import BlockPool


def test_free_blocks_are_evicted_least_recently_freed_first_and_tail_first() -> None:
    pool = BlockPool(num_blocks=4, block_size=16)
    a = pool.allocate(2)
    pool.cache(a, [100, 101])
    b2 = pool.allocate(2)
    pool.cache(b2, [200, 201])
    pool.release(a)  # freed first: evicted first, its tail (hash 101) before its head
    pool.release(b2)
    assert pool.num_free == 4 and pool.usage == 0.0
    pool.allocate(1)
    assert 101 not in pool.cached and 100 in pool.cached
    pool.allocate(1)
    assert 100 not in pool.cached and {200, 201} <= set(pool.cached)
    assert pool.evictions == 2


def test_touching_a_free_cached_block_protects_it_from_eviction() -> None:
    pool = BlockPool(num_blocks=3, block_size=16)
    blocks = pool.allocate(3)
    pool.cache(blocks, [0, 1, 2])
    pool.release(blocks)  # queue: block 2, 1, 0 (tail first)
    hit = pool.longest_hit([0, 1, 2])
    assert hit == blocks
    assert pool.evictable(hit[:1]) == 1
    pool.touch(hit[:1])  # block 0 in use again
    assert pool.num_free == 2
    pool.allocate(2)
    assert set(pool.cached) == {0}
    assert pool.count_hit([0, 1]) == 1


def test_count_hit_finds_the_cached_prefix_and_respects_the_cap() -> None:
    pool = BlockPool(num_blocks=64, block_size=16)
    blocks = pool.allocate(40)
    pool.cache(blocks[:37], list(range(37)))
    chain = list(range(40))
    for cap in (None, 0, 1, 36, 37, 39):
        want = 37 if cap is None else min(cap, 37)
        assert pool.count_hit(chain, cap) == want
        assert pool.longest_hit(chain, cap) == blocks[:want]
    assert pool.count_hit([99, *range(1, 37)]) == 0


def test_a_hash_stays_cached_while_any_block_holds_it() -> None:
    pool = BlockPool(num_blocks=3, block_size=16)
    a, b = pool.allocate(1), pool.allocate(1)
    pool.cache(a, [5])
    pool.cache(b, [5])  # the same content prefilled twice at once
    pool.release(a)
    pool.allocate(2)  # evicts a (and the never-used third block)
    assert pool.count_hit([5]) == 1 and pool.longest_hit([5]) == b
    pool.release(b)
    pool.allocate(1)
    assert pool.count_hit([5]) == 0 and not pool.dups


def test_never_used_blocks_go_before_freed_cached_ones() -> None:
    pool = BlockPool(num_blocks=4, block_size=16)
    a = pool.allocate(1)
    pool.cache(a, [42])
    pool.release(a)
    assert pool.num_free == 4
    assert pool.allocate(3) == [1, 2, 3]  # the queue's head: blocks never used
    assert pool.count_hit([42]) == 1
    assert pool.allocate(1) == a and pool.count_hit([42]) == 0
