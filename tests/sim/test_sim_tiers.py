"""KV tiers below HBM in the simulator (issue 29): one session through evict, offload, pause
and reload, checked against values computed by hand; the tier store's own rules."""

from __future__ import annotations

from typing import Any

import pytest

from agentic_kvc.cache.tier_store import Link, TierStore
from agentic_kvc.config import load_config
from agentic_kvc.profiles.cost import AffineStepCost, EngineProfile
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.tiers import GIB
from agentic_kvc.workload.model import Block, Request, Session, Workload
from agentic_kvc.workload.tokens import engine_block_hashes

BS = 16
KV_BYTES = 1000  # per token: a block is 16,000 bytes
BLOCK = BS * KV_BYTES
# A step costs 10 ms + 1 ms per scheduled token: times below are sums of these.
PROFILE = EngineProfile(
    "test", "tiny", AffineStepCost(overhead_s=0.01, per_token_s=0.001), KV_BYTES, 1024, "test"
)


def _workload(pause_s: float = 5.0) -> Workload:
    """A: a 480-token turn (30 blocks), a tool pause, then a 640-token turn extending it.
    B, at t=1 s while A pauses, a 960-token one-off prompt that evicts most of A's blocks
    from the 64-block HBM."""
    a0 = Request("a0", "A", 0, 480, 2, (Block(1, 480),))
    a1 = Request(
        "a1", "A", 1, 640, 2, (Block(1, 480), Block(2, 160)), think_s=pause_s, parent_id="a0"
    )
    b = Request("b", "B", 0, 960, 1, (Block(9, 960),), arrival_s=1.0)
    return Workload([Session("A", [a0, a1]), Session("B", [b])])


def _run(tiers: dict[str, Any], pause_s: float = 5.0, **sim: Any) -> SimFleet:
    return run_fleet(_workload(pause_s), tiers, **sim)


def run_fleet(
    wl: Workload,
    tiers: dict[str, Any],
    fleet: dict[str, Any] | None = None,
    policy: str | None = None,
    **sim: Any,
) -> SimFleet:
    """`wl` on one instance with a 64-block HBM, `tiers` below it (`fleet`: more fleet fields;
    `policy`: another router than the config's default); every request completes.
    (test_sim_pause_aware.py and others drive their own workloads through it.)"""
    config = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 1}},  # replaced below
            **({"policy": {"name": policy}} if policy else {}),
            "fleet": {
                "instances": 1,
                "kv_cache_tokens": 64 * BS,
                "block_size": BS,
                "kv_tiers": tiers,
                **(fleet or {}),
            },
            "sim": sim,
        }
    )
    fleet = SimFleet(config, wl, PROFILE)
    fleet.run()
    assert all(r.error is None and r.t_done is not None for r in fleet.records)
    return fleet


def _rec(fleet: SimFleet, rid: str) -> Any:
    return next(r for r in fleet.records if r.request_id == rid)


HOST = {  # 10 MB/s each way, 2 ms per transfer: 26 blocks take 41.6 ms + 2 ms
    "host_gib": 1.0,
    "host_h2d_gbps": 0.01,
    "host_d2h_gbps": 0.01,
    "host_latency_s": 0.002,
    # Blocks go down at HBM eviction only. vLLM's lazy walk (1,024 blocks a step at 8,192
    # batched tokens) would cover this 64-block pool and store each turn when it ends:
    # test_a_lazy_walk_over_the_whole_pool_stores_each_turn_when_it_ends.
    "lazy_store": "eviction",
}
HOST_SMALL_DISK = {  # host holds 10 blocks, its overflow goes to the instance's 1 MB/s disk
    **HOST,
    "host_gib": (10 * BLOCK + 1) / GIB,
    "disk_gib": 1.0,
    "disk_scope": "instance",
    "disk_read_gbps": 0.001,
    "disk_write_gbps": 0.01,
    "disk_latency_s": 0.005,
}


def test_hbm_only_recomputes_what_was_evicted() -> None:
    # Timeline: a0 prefills 480 tokens (0.49 s) and decodes one (0.011 s): done at 0.501,
    # holding 31 blocks (30 hashed). B at 1.0 needs 60: the 33 never-used blocks, a0's partial
    # one, then 26 of a0's from their tail: a0 keeps blocks 0-3 (64 tokens) in HBM.
    fleet = _run({})
    a1 = _rec(fleet, "a1")
    assert a1.cached_tokens == 64
    assert a1.t_proxy_recv == pytest.approx(5.501)
    assert a1.ttft_s == pytest.approx(0.01 + 0.001 * (640 - 64))
    d = a1.to_dict()
    assert "host_tokens" not in d and "reload_wait_s" not in d  # tier-off records unchanged
    assert all("host_kv_usage" not in s.to_dict() for s in fleet.samples)


def test_evict_offload_pause_reload_by_hand() -> None:
    # B's admission evicts a0's blocks 4-29 from HBM: written to host at t=1.0 (landed by
    # 1.0436). a1 at 5.501 hits blocks 0-3 in HBM, 4-29 (416 tokens) in host: a load of
    # 416,000 bytes at 10 MB/s + 2 ms = 43.6 ms while it waits; then it prefills the 160
    # tokens no tier holds: 0.17 s.
    fleet = _run(HOST)
    a1 = _rec(fleet, "a1")
    wait = 0.002 + 26 * BLOCK / 0.01e9
    assert (a1.cached_tokens, a1.host_tokens, a1.disk_tokens) == (64, 416, 0)
    assert a1.recomputed_tokens == 160
    assert a1.reload_wait_s == pytest.approx(wait)
    assert a1.ttft_s == pytest.approx(wait + 0.01 + 0.001 * 160)
    inst = fleet.instances[0]
    assert inst.external_hits == 416
    assert fleet.stats.reloads == 1
    # the first turn and B: nothing below HBM yet
    assert (_rec(fleet, "a0").host_tokens, _rec(fleet, "b").host_tokens) == (0, 0)
    assert _rec(fleet, "a0").reload_wait_s == 0.0
    host = inst.tiers.host  # type: ignore[union-attr]
    assert host is not None and host.write.transfers >= 1
    assert any((s.to_dict().get("host_kv_usage") or 0) > 0 for s in fleet.samples)


def test_a_load_waits_for_the_write_still_on_the_link() -> None:
    # Device-to-host at 50 KB/s: a0's 26 blocks land at 1.0 + 0.002 + 8.32 s = 9.322, after
    # a1 arrives (5.501); its load starts then and takes 43.6 ms.
    fleet = _run({**HOST, "host_d2h_gbps": 0.00005})
    a1 = _rec(fleet, "a1")
    landed = 1.0 + 0.002 + 26 * BLOCK / 0.00005e9
    end = landed + 0.002 + 26 * BLOCK / 0.01e9
    assert a1.host_tokens == 416
    assert a1.reload_wait_s == pytest.approx(end - 5.501)


def test_host_overflow_goes_to_disk_and_both_load_at_once() -> None:
    # Host holds 10 blocks: of a0's 26 evicted ones it keeps the head (4-13), the tail
    # (14-29) moves on to disk. a1 loads 10 blocks from host (2 ms + 16 ms) and 16 from disk
    # at 1 MB/s (5 ms + 256 ms) in parallel: it waits for the disk.
    fleet = _run(HOST_SMALL_DISK)
    a1 = _rec(fleet, "a1")
    assert (a1.cached_tokens, a1.host_tokens, a1.disk_tokens) == (64, 160, 256)
    assert a1.recomputed_tokens == 160
    disk_s = 0.005 + 16 * BLOCK / 0.001e9
    assert a1.reload_wait_s == pytest.approx(max(0.002 + 10 * BLOCK / 0.01e9, disk_s))
    assert a1.ttft_s == pytest.approx(disk_s + 0.17)


def test_write_through_stores_the_turn_at_its_end() -> None:
    # a0's 30 full blocks go to host when it ends (0.501), not when HBM evicts them: a1 finds
    # the same blocks there (HBM keeps 4 of them).
    fleet = _run({**HOST, "write_through": True})
    a1 = _rec(fleet, "a1")
    assert (a1.cached_tokens, a1.host_tokens) == (64, 416)
    host = fleet.instances[0].tiers.host  # type: ignore[union-attr]
    assert host is not None
    # every turn's full blocks written once, when it ended; nothing on eviction
    assert host.write.bytes == (30 + 60 + 10) * BLOCK  # a0, B, a1's 10 new blocks


def test_a_lazy_walk_over_the_whole_pool_stores_each_turn_when_it_ends() -> None:
    # vLLM 0.32's lazy walk, 2 x 8,192 / 16 = 1,024 blocks a step, covers the 64-block pool:
    # every freed block is stored at the next step, so a turn's full blocks go down when it
    # ends, as with write-through (a0's 30, B's 60, a1's 10 new), and HBM's evictions then
    # find them held, all but one: B's block 23, evicted alone at 5.715 s, whose run's
    # indexed blocks (0, 16) lie outside it, so the store cannot see it held and writes it
    # again (TierStore._find's documented miss: capacity, never a hit). Stored at eviction
    # alone, a0's 26 evicted blocks go down at B's admission and B's at a1's: other bytes,
    # the same hits for a1.
    walk = _run({**HOST, "lazy_store": "walk"})
    tiers = walk.instances[0].tiers
    assert tiers is not None and tiers.store_at_free and not tiers.write_through
    assert tiers.host is not None
    assert tiers.host.write.bytes == (30 + 60 + 10 + 1) * BLOCK
    a1 = _rec(walk, "a1")
    assert (a1.cached_tokens, a1.host_tokens) == (64, 416)
    at_eviction = _run(HOST)
    host = at_eviction.instances[0].tiers.host  # type: ignore[union-attr]
    assert host is not None and host.write.bytes != tiers.host.write.bytes
    assert (_rec(at_eviction, "a1").cached_tokens, _rec(at_eviction, "a1").host_tokens) == (
        64,
        416,
    )
    # A walk shorter than the pool (2 x ceil(496 / 16) = 62 < 64 blocks) stores at eviction.
    short = run_fleet(_workload(), {**HOST, "lazy_store": "walk"}, {"max_num_batched_tokens": 496})
    assert not short.instances[0].tiers.store_at_free  # type: ignore[union-attr]
    # `free` (the simulator's bound: a walk that sweeps the whole free queue) stores each turn
    # when it ends whatever the walk's length: the same writes as the walk over the pool.
    free = run_fleet(_workload(), {**HOST, "lazy_store": "free"}, {"max_num_batched_tokens": 496})
    free_tiers = free.instances[0].tiers
    assert free_tiers is not None and free_tiers.store_at_free
    assert free_tiers.host is not None
    assert free_tiers.host.write.bytes == (30 + 60 + 10 + 1) * BLOCK


def test_a_lazy_walk_loses_what_a_waiting_request_takes_before_it_runs() -> None:
    # vLLM 0.32 allocates a step's blocks before its lazy walk runs, so a request that waits
    # for a finishing one's blocks takes them unstored (measured on a real engine: 38 of 90,
    # benchmarks/tier_store_race_real.py). a0: 480 prompt tokens (30 blocks) and 448 output;
    # B (60 blocks) arrives at 0.2 s, during a0's prefill, and waits: a0 ends holding 58
    # blocks (57 full: its prompt's 30 and 27 of output, and a partial one) with 6 free.
    # The step after a0 ends admits B: the 6 never-used blocks, a0's partial one, its 27
    # output blocks and 26 of its prompt's (29 down to 4) from the tail; the walk then finds
    # a0's blocks 0-3 alone to store. a1 (five seconds later) hits those 4 in HBM and nothing
    # below: it recomputes 576 tokens, where a store at free (the simulator's bound `free`)
    # or at eviction (the GPU regime) had kept blocks 4-29 in host (416 tokens).
    a0 = Request("a0", "A", 0, 480, 448, (Block(1, 480),))
    a1 = Request("a1", "A", 1, 640, 2, (Block(1, 480), Block(2, 160)), think_s=5.0, parent_id="a0")
    b = Request("b", "B", 0, 960, 1, (Block(9, 960),), arrival_s=0.2)
    wl = Workload([Session("A", [a0, a1]), Session("B", [b])])
    walk = run_fleet(wl, {**HOST, "lazy_store": "walk"})
    tiers = walk.instances[0].tiers
    assert tiers is not None and tiers.store_after_allocations
    b_rec = _rec(walk, "b")
    assert b_rec.t_proxy_recv == pytest.approx(0.2)
    # a0 ends at 0.49 + 447 x 0.011 (its prefill step made the first token); then B prefills
    assert b_rec.t_prefill_done == pytest.approx(0.49 + 447 * 0.011 + 0.97)
    assert (_rec(walk, "a1").cached_tokens, _rec(walk, "a1").host_tokens) == (64, 0)
    assert _rec(walk, "a1").recomputed_tokens == 576
    for other in ("free", "eviction"):
        fleet = run_fleet(wl, {**HOST, "lazy_store": other})
        assert (_rec(fleet, "a1").cached_tokens, _rec(fleet, "a1").host_tokens) == (64, 416)


def test_tiers_are_deterministic_and_keep_the_run_id_off() -> None:
    a = [r.to_dict() for r in _run(HOST).records]
    b = [r.to_dict() for r in _run(HOST).records]
    assert a == b
    base = {"backend": "sim", "workload": {"generator": {"sessions": 1}}}
    assert load_config(base).run_id() == load_config({**base, "fleet": {}}).run_id()
    # vLLM's walk (the default) keeps tiered run ids from before the field; the idealised
    # store at eviction is another run.
    host = {**base, "fleet": {"kv_tiers": {"host_gib": 1.0}}}
    walk = {**base, "fleet": {"kv_tiers": {"host_gib": 1.0, "lazy_store": "walk"}}}
    evict = {**base, "fleet": {"kv_tiers": {"host_gib": 1.0, "lazy_store": "eviction"}}}
    assert load_config(host).run_id() == load_config(walk).run_id()
    assert load_config(host).run_id() != load_config(evict).run_id()
    free = {**base, "fleet": {"kv_tiers": {"host_gib": 1.0, "lazy_store": "free"}}}
    assert len({load_config(c).run_id() for c in (host, evict, free)}) == 3
    assert "lazy_store" not in load_config(host).canonical()["fleet"]["kv_tiers"]


def test_retention_needs_a_ttl() -> None:
    with pytest.raises(ValueError, match=r"fleet\.kv_tiers\.eviction"):
        _run({**HOST, "eviction": "retention"})


def test_retention_evicts_a_paused_session_last() -> None:
    # The store: a held run is passed over while its pause lasts, evicted first after it.
    small = {**HOST, "host_gib": (30 * BLOCK + 1) / GIB}
    store = TierStore("t", 4, BLOCK, Link(1.0, 0.0), Link(1.0, 0.0), retention=True)
    store.put([(0, [1, 2])], 0.0)
    store.hold([1, 2], until=10.0)
    store.put([(0, [7, 8, 9])], 1.0)  # over by one: the held run is passed over
    assert store.run([1, 2], 0, 2) == 2 and store.run([7, 8, 9], 0, 3) == 2
    store.put([(0, [5, 6])], 20.0)  # the hold is over: evicted first
    assert store.run([1, 2], 0, 2) == 0 and store.run([7, 8], 0, 2) == 2

    # In a fleet: C (960 tokens at 2.5 s) evicts B's and a0's last HBM blocks, which push
    # a0's out of a 30-block host under LRU; retention keeps a0's (in a pause until 30.5 s).
    def a1_host(eviction: str) -> int:
        config = load_config(
            {
                "backend": "sim",
                "workload": {"generator": {"sessions": 1}},
                "fleet": {
                    "instances": 1,
                    "kv_cache_tokens": 64 * BS,
                    "kv_tiers": {**small, "eviction": eviction},
                },
                "sim": {"kv_retention_ttl_s": 30.0},
            }
        )
        c = Request("c", "C", 0, 960, 1, (Block(19, 960),), arrival_s=2.5)
        w = _workload()
        fleet = SimFleet(config, Workload([*w.sessions, Session("C", [c])]), PROFILE)
        fleet.run()
        rec = _rec(fleet, "a1")
        assert rec.host_tokens + rec.cached_tokens + rec.recomputed_tokens == 640
        return rec.host_tokens

    assert (a1_host("lru"), a1_host("retention")) == (0, 480)


def test_instance_tier_hits_reads_hbm_then_host() -> None:
    # a0 and B only: a0's blocks 0-3 stay in HBM, 4-29 went to host.
    config = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 1}},
            "fleet": {"instances": 1, "kv_cache_tokens": 64 * BS, "kv_tiers": HOST},
        }
    )
    w = _workload()
    a0, a1 = w.sessions[0].requests
    fleet = SimFleet(config, Workload([Session("A", [a0]), w.sessions[1]]), PROFILE)
    fleet.run()
    inst = fleet.instances[0]
    got = inst.tier_hits(engine_block_hashes(a1, BS))  # a1's prompt: a0's and 10 new blocks
    assert (got.hbm, got.host, got.disk) == (64, 416, 0)
    assert inst.tier_hits(engine_block_hashes(a1, BS)[:2]) == type(got)(32, 0, 0)


def test_store_finds_runs_and_never_holds_a_block_twice() -> None:
    down = TierStore("d", 100, 1, Link(1.0, 0.0), Link(1.0, 0.0))
    store = TierStore("h", 40, 1, Link(1.0, 0.0), Link(1.0, 0.0), below=down)
    chain = list(range(1000, 1060))  # chain positions 0..59
    assert store.put([(20, chain[20:50])], 0.0) == 30
    assert store.run(chain, 20, 60) == 30 and store.run(chain, 0, 60) == 0
    assert store.run(chain, 37, 60) == 13  # from inside a run: found by its indexed blocks
    # overlapping runs: only the new blocks are stored (10-19 and 50-54), 45 in all, so 5
    # leave for the tier below: from the least recent run, the first one given (10-19), its
    # tail first.
    assert store.put([(10, chain[10:30]), (45, chain[45:55])], 1.0) == 15
    assert len(store) == 40 and len(down) == 5
    here = {p for p in range(60) if store.run(chain, p, p + 1)}
    below = {p for p in range(60) if down.run(chain, p, p + 1)}
    assert not here & below and here | below == set(range(10, 55))
    assert below == set(range(15, 20)) and store.run(chain, 10, 60) == 5
    assert store.write.bytes == 30 + 15 and down.write.bytes == 5


def test_link_is_fifo() -> None:
    link = Link(0.001, 0.5)  # 1 MB/s, 0.5 s each
    assert link.send(0.0, 1_000_000) == pytest.approx(1.5)
    assert link.send(1.0, 500_000) == pytest.approx(2.5)  # queued behind the first
    assert link.send(3.0, 0, after=4.0) == pytest.approx(4.5)  # not before its data is there


def test_a_loaded_request_is_scheduled_before_a_blocked_head() -> None:
    # vLLM drains requests holding KV blocks first: a loaded request must not wait behind a
    # head that cannot get blocks (nothing running would ever free them).
    from agentic_kvc.config import KVTiersConfig
    from agentic_kvc.profiles.hardware import tier_links
    from agentic_kvc.sim.engine import Instance, Seq
    from agentic_kvc.sim.tiers import FleetTiers

    inst = Instance(0, PROFILE.cost, 10, BS, 8, 1000)
    tiers = FleetTiers(KVTiersConfig(host_gib=1.0), tier_links("cpu-tiny"), PROFILE, BS, 1, 0.0)
    inst.set_tiers(tiers.instances[0])
    chain = list(range(1, 7))
    host = tiers.instances[0].host
    assert host is not None
    host.put([(0, chain[:5])], 0.0)
    loaded = Seq(1, 6 * BS, 1, chain)  # blocks 0-4 in host, its last one recomputed
    inst.submit(loaded)
    step = inst.schedule(0.0)
    assert step is not None and step.transfers == [loaded] and loaded.reload is not None
    head = Seq(2, 10 * BS, 1, list(range(100, 110)))  # needs all 10 blocks: 5 are taken
    inst.waiting.appendleft(head)  # at the head of the queue, as a preempted request returns
    inst.step = step
    inst.finish_step()
    assert inst.schedule(0.0) is None  # the load is in flight, the head cannot fit
    inst.kv_landed(loaded)
    step = inst.schedule(1.0)
    assert step is not None and step.seqs == [loaded] and step.num_new == [BS]
    assert list(inst.waiting) == [head]


@pytest.mark.parametrize(
    ("lazy_store", "batched", "told"),
    [("free", 496, True), ("walk", 8192, True), ("walk", 496, False), ("eviction", 8192, False)],
)
def test_the_routers_estimate_stores_at_free_when_the_engine_does(
    lazy_store: str, batched: int, told: bool
) -> None:
    # A tier-pricing router's estimate of the host tier (cache/tier_index.py) stores each
    # routed prompt when the engine's tier stores turns as they are freed (the walk covers
    # the 64-block pool at 8,192 batched tokens, not at 496; `free` whatever the walk).
    fleet = run_fleet(
        _workload(),
        {**HOST, "lazy_store": lazy_store},
        {"max_num_batched_tokens": batched},
        policy="dynamo_kv",
    )
    assert fleet.instances[0].tiers.store_at_free is told  # type: ignore[union-attr]
    assert fleet.state.cache.store_at_free is told  # type: ignore[union-attr]
