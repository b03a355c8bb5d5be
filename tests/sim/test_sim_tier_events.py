"""The simulator's KV events with a medium (issue 29 item 2): the tier stores publish
BlockStored / BlockRemoved with medium CPU / DISK as blocks move to and from host and disk, and
the simulator's exact view keeps its map of the tiers from them with the proxy's own event
index, not by reading the stores."""

from __future__ import annotations

from typing import Any

from agentic_kvc.cache.prefix_index import ExactPrefixIndex
from agentic_kvc.cache.tier_store import Link, TierStore
from agentic_kvc.config import load_config
from agentic_kvc.policy.base import TierHits
from agentic_kvc.sim.fleet import SimFleet, TieredExactCacheView
from tests.sim.test_sim_tiers import BS, HOST_SMALL_DISK, PROFILE, _rec, _workload

# Host holds 10 blocks; its overflow goes to the instance's disk (test_sim_tiers'
# test_host_overflow_goes_to_disk_and_both_load_at_once, timings by hand there).
TIERS = HOST_SMALL_DISK


def _content(store: TierStore | None) -> set[int]:
    """Every block a store holds (its runs, LRU and held)."""
    if store is None:
        return set()
    return {h for r in (*store.lru, *store.held) for h in r.hashes}


def _exact_fleet(policy: str) -> SimFleet:
    config = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 1}},  # replaced below
            "policy": {"name": policy, "cache_view": "exact"},
            "fleet": {
                "instances": 1,
                "kv_cache_tokens": 64 * BS,
                "block_size": BS,
                "kv_tiers": TIERS,
            },
        }
    )
    return SimFleet(config, _workload(), PROFILE)


def test_evict_offload_reload_the_exact_view_follows_the_events() -> None:
    fleet = _exact_fleet("llmd_precise")  # reads the tiers at every decision
    view = fleet.state.cache
    assert isinstance(view, TieredExactCacheView)
    assert fleet.tiers is not None
    inst = fleet.instances[0]
    assert inst.tiers is not None
    host, disk = inst.tiers.host, inst.tiers.disk
    index = view.events
    seen: list[tuple[str, str, int]] = []

    def check(instance: int, event: dict[str, Any]) -> None:
        # The view's own sink first, then: its per-tier map is each store's content.
        index.apply(instance, event)
        seen.append((event["type"], event["medium"], len(event["block_hashes"])))
        assert index.keys(0, "host") == _content(host)
        assert index.keys(0, "disk") == _content(disk)

    fleet.tiers.publish(check)  # (replaces the view's sink with one that checks each step)
    asked: list[tuple[TierHits, Any]] = []
    answer = view.tier_hits

    def tier_hits(request: Any, n: int) -> list[TierHits]:
        got = answer(request, n)
        asked.append((got[0], inst.tier_hits(request.block_hashes)))
        return got

    view.tier_hits = tier_hits  # type: ignore[method-assign]
    fleet.run()
    # B's admission evicts a0's blocks 4-29 from HBM: all 26 go to host (CPU), which keeps
    # 10 and hands its 16 least recent (the tail) down to disk.
    assert seen[:3] == [
        ("BlockStored", "CPU", 26),
        ("BlockRemoved", "CPU", 16),
        ("BlockStored", "DISK", 16),
    ]
    # Every answer the router got is the stores' own (Instance.tier_hits reads them), and
    # a1 was routed seeing 4 HBM blocks, 10 host and 16 disk ones: what it then loaded.
    assert all(got == ref for got, ref in asked)
    assert TierHits(64, 160, 256) in [got for got, _ in asked]
    a1 = _rec(fleet, "a1")
    assert (a1.cached_tokens, a1.host_tokens, a1.disk_tokens) == (64, 160, 256)
    assert host is not None and disk is not None
    assert (index.blocks(0, "host"), index.blocks(0, "disk")) == (len(host), len(disk))
    assert len(disk) > 16  # (the run went on moving blocks down after a1's load)


def test_exact_view_records_equal_reading_the_stores() -> None:
    # The same run, routed on the events, gives the records of one whose view reads the
    # stores directly (the view before the events).
    fleet = _exact_fleet("predicted_ttft")
    fleet.run()
    ref = _exact_fleet("predicted_ttft")
    view = ref.state.cache
    assert isinstance(view, TieredExactCacheView)

    def direct(request: Any, n: int) -> list[Any]:
        return [inst.tier_hits(request.block_hashes) for inst in ref.instances[:n]]

    view.tier_hits = direct  # type: ignore[method-assign]
    ref.run()
    assert [r.to_dict() for r in fleet.records] == [r.to_dict() for r in ref.records]


def test_a_block_held_twice_is_stored_and_removed_once() -> None:
    # A run at chain positions 5-7 (its head off the MARK grid), then a write of 0-31 checked
    # at MARK positions only (`sampled`): the store misses 5-7 and holds them twice. The
    # events name each block once, and remove it only with its last copy.
    idle = Link(1.0, 0.0)
    store = TierStore("host0", 100, 1, idle, idle)
    index = ExactPrefixIndex(1, BS, engine_keys=True)
    store.publish(lambda ev: index.apply(0, ev))
    hashes = [1000 + i for i in range(32)]
    store.put([(5, hashes[5:8])], 0.0)
    store.put([(0, hashes[:])], 1.0, [True])
    assert len(store) == 35  # 3 blocks twice
    assert index.keys(0, "host") == set(hashes) == _content(store)
    store.capacity = 32
    store._evict(3, 2.0)  # the older run (5-7) goes: its blocks are still held
    assert len(store) == 32
    assert index.keys(0, "host") == set(hashes) == _content(store)
    store._evict(30, 3.0)  # the tail of the other: positions 2-31
    assert index.keys(0, "host") == set(hashes[:2]) == _content(store)


def test_shared_disk_events_reach_every_instance_that_reads_it() -> None:
    # Two instances, one disk store for the fleet, no host tier: HBM evictions of instance 0
    # go to the disk, which both instances read, so both see its blocks.
    config = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 1}},
            "policy": {"name": "predicted_ttft", "cache_view": "exact"},
            "fleet": {
                "instances": 2,
                "kv_cache_tokens": 64 * BS,
                "block_size": BS,
                "kv_tiers": {**TIERS, "host_gib": 0.0, "disk_scope": "fleet"},
            },
        }
    )
    fleet = SimFleet(config, _workload(), PROFILE)
    view = fleet.state.cache
    assert isinstance(view, TieredExactCacheView) and fleet.tiers is not None
    (disk,) = fleet.tiers.disks
    hashes = [2000 + i for i in range(40)]
    fleet.tiers.instances[0].offload([(0, hashes, False)], 0.0)
    assert len(disk) == 40
    assert view.events.keys(0, "disk") == view.events.keys(1, "disk") == _content(disk)
    assert view.events.keys(0, "host") == view.events.keys(1, "host") == set()


def test_no_events_without_the_exact_view() -> None:
    config = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 1}},
            "policy": {"name": "predicted_ttft"},
            "fleet": {
                "instances": 1,
                "kv_cache_tokens": 64 * BS,
                "block_size": BS,
                "kv_tiers": TIERS,
            },
        }
    )
    fleet = SimFleet(config, _workload(), PROFILE)
    fleet.run()
    it = fleet.instances[0].tiers
    assert it is not None and it.host is not None and it.disk is not None
    assert len(it.host) > 0 and len(it.disk) > 0
    assert it.host.events is None and it.disk.events is None
    assert it.host.copies == {} and it.disk.copies == {}
