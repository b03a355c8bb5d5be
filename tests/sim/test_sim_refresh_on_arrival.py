"""A waiting request's cached prefix made most recent when it arrives (sim.refresh_on_arrival;
docs/kv_tiers/study_followups.md, "Prefixes lost while queued"): the pool moves the free blocks
of a hit to the free queue's tail, and the engine does so for each request it is handed, so the
requests admitted ahead of it evict older blocks first. Block counts computed by hand."""

from __future__ import annotations

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.sim.blocks import BlockPool
from agentic_kvc.workload.model import Block, Request, Session, Workload
from tests.sim.test_sim_blocks import fill
from tests.sim.test_sim_tiers import BS, _rec, run_fleet


def test_refresh_moves_free_blocks_behind_newer_ones() -> None:
    pool = BlockPool(num_blocks=4, block_size=16)
    a = fill(pool, [100, 101])
    b = fill(pool, [200, 201])
    pool.release(a)  # queue: 101, 100, 201, 200 (a freed first, tail first)
    pool.release(b)
    assert pool.refresh(pool.lookup([100, 101])) == 2  # queue: 201, 200, 101, 100
    pool.allocate(type(a)(), 2)
    assert set(pool.cached) == {100, 101}
    pool.allocate(type(a)(), 1)  # the tail of the refreshed prompt goes first
    assert set(pool.cached) == {100}


def test_refresh_of_a_partial_hit_moves_only_the_hit() -> None:
    pool = BlockPool(num_blocks=5, block_size=16)
    a = fill(pool, [100, 101, 102])
    b = fill(pool, [200, 201])
    pool.release(a)  # queue: 102, 101, 100, 201, 200
    pool.release(b)
    # A prompt that leaves a's chain after its first block: only block 100 moves.
    hit = pool.lookup([100, 999])
    assert hit.n == 1 and pool.refresh(hit) == 1  # queue: 102, 101, 201, 200, 100
    pool.allocate(type(a)(), 4)
    assert set(pool.cached) == {100}
    assert pool.count_hit([100, 101]) == 1


def test_blocks_in_use_are_left_where_they_are() -> None:
    pool = BlockPool(num_blocks=4, block_size=16)
    a = fill(pool, [100, 101])  # still held
    b = fill(pool, [200, 201])
    pool.release(b)
    assert pool.refresh(pool.lookup([100, 101])) == 0
    assert pool.num_free == 2
    pool.release(a)
    assert pool.num_free == 4


def _workload() -> Workload:
    """A's first turn (480 tokens, 30 blocks) ends at 0.501 s; D (320 tokens, 20 blocks) runs
    0.6-0.93 s, so its blocks are newer than A's. B (160 tokens) runs from 1.0 s to 1.17 s; C
    (320 tokens) arrives at 1.01 s and A's second turn (640 tokens, extending the first) at
    1.02 s: with one request running at a time both wait for B, C first."""
    a0 = Request("a0", "A", 0, 480, 2, (Block(1, 480),))
    a1 = Request(
        "a1", "A", 1, 640, 1, (Block(1, 480), Block(2, 160)), think_s=0.519, parent_id="a0"
    )
    d = Request("d", "D", 0, 320, 1, (Block(7, 320),), arrival_s=0.6)
    b = Request("b", "B", 0, 160, 1, (Block(8, 160),), arrival_s=1.0)
    c = Request("c", "C", 0, 320, 1, (Block(9, 320),), arrival_s=1.01)
    return Workload(
        [Session("A", [a0, a1]), Session("D", [d]), Session("B", [b]), Session("C", [c])]
    )


@pytest.mark.parametrize("refresh", [False, True])
def test_a_queued_turn_keeps_its_prefix_when_refreshed(refresh: bool) -> None:
    # When B ends the free queue holds 3 never-used blocks, a0's partial block, a0's 30, D's
    # 20 and B's 10 (LRU order). C takes 20 from the head: without the refresh 16 of a0's
    # (tail first), so a1 finds 14 of its 30 blocks; refreshed at a1's arrival, a0's blocks
    # moved behind D's, C takes 16 of D's and a1 finds all 30.
    fleet = run_fleet(_workload(), {}, {"max_num_seqs": 1}, refresh_on_arrival=refresh)
    assert _rec(fleet, "a1").cached_tokens == (30 if refresh else 14) * BS
    # Only a1 arrives with a hit: its 30 blocks moved.
    assert fleet.instances[0].refreshed == (30 if refresh else 0)
    assert _rec(fleet, "c").cached_tokens == 0


def test_refresh_on_arrival_enters_the_run_id_only_when_on() -> None:
    base = {"backend": "sim", "workload": {"generator": {"sessions": 1}}}
    off = load_config(base)
    assert "refresh_on_arrival" not in off.canonical()["sim"]
    on = load_config(base, ["sim.refresh_on_arrival=true"])
    assert on.canonical()["sim"]["refresh_on_arrival"] is True and on.run_id() != off.run_id()
