"""A tier's recency follows the vLLM connector it models (cache/tier_store.py, docs/kv_tiers.md).

`OffloadingConnector` (`simple_lru` False) touches a request's blocks tail first, stored ones
included, so a prompt's head is evicted last. `SimpleCPUOffloadConnector` (`simple_lru` True,
store-on-eviction tiers) skips blocks its host pool holds already, and frees a load's host blocks
in position order, so a loaded prompt's head is evicted first. Hand-computed on a 10-block store.
"""

from __future__ import annotations

import pytest

from agentic_kvc.cache.tier_store import Link, TierStore

A = [101, 102, 103, 104, 105, 106]  # a prompt's chained hashes, positions 0-5
B = [201, 202, 203, 204]  # another prompt's, positions 0-3
C = list(range(301, 308))  # a third, 7 blocks


def _store(simple_lru: bool) -> TierStore:
    link = Link(1.0, 0.0)
    return TierStore("host", 10, 1, link, link, simple_lru=simple_lru)


@pytest.mark.parametrize("simple_lru", [False, True])
def test_a_loaded_prompt_loses_its_head_first_only_with_the_simple_connector(
    simple_lru: bool,
) -> None:
    store = _store(simple_lru)
    store.put([(0, list(A))], 0.0)
    store.put([(0, list(B))], 1.0)  # 10 blocks: full
    store.touch(A, 0, 6)  # A loaded: most recent, B the least
    store.put([(0, list(C))], 2.0)  # 7 over: all of B (4), then 3 of A's
    assert len(store) == 10
    assert store.run(B, 0, 4) == 0
    if simple_lru:
        # A's head went: nothing from position 0, its tail still held from position 3.
        assert store.run(A, 0, 6) == 0
        assert store.run(A, 3, 6) == 3
    else:
        # A's tail went: its head is still a prefix of 3 blocks.
        assert store.run(A, 0, 6) == 3
        assert store.run(A, 3, 6) == 0
    assert store.run(C, 0, 7) == 7


@pytest.mark.parametrize("simple_lru", [False, True])
def test_storing_held_blocks_again_moves_them_only_with_the_offloading_connector(
    simple_lru: bool,
) -> None:
    store = _store(simple_lru)
    store.put([(0, list(A))], 0.0)
    store.put([(0, list(B))], 1.0)
    assert store.put([(0, list(A))], 2.0) == 0  # all held: nothing new, nothing written
    store.put([(0, [401, 402, 403, 404])], 3.0)  # 4 over
    if simple_lru:
        # A kept its place (oldest): 4 of its blocks went, tail first (never loaded).
        assert store.run(A, 0, 6) == 2
        assert store.run(B, 0, 4) == 4
    else:
        # Storing A again made it the most recent: B went.
        assert store.run(A, 0, 6) == 6
        assert store.run(B, 0, 4) == 0


def test_a_store_after_a_load_keeps_new_blocks_behind_the_loaded_ones() -> None:
    """Simple connector: HBM evicts a loaded prompt whose tail it extended; the held part
    keeps its load-time place, the new tail is the most recent."""
    store = _store(True)
    store.put([(0, list(A[:4]))], 0.0)
    store.put([(0, list(B))], 1.0)
    store.touch(A, 0, 4)  # loaded: [B, A(0-3)]
    assert store.put([(0, list(A))], 2.0) == 2  # A's positions 4-5 are new: [B, A(0-3), A(4-5)]
    store.put([(0, [401, 402, 403, 404, 405, 406])], 3.0)  # 6 over: B, then A's head 0-1
    assert store.run(B, 0, 4) == 0
    assert store.run(A, 0, 6) == 0
    assert store.run(A, 2, 6) == 4
