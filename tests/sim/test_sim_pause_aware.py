"""Pause-aware KV placement (sim.pause_aware; policy/pause.py): a session that pauses long is
demoted at its turn's end (HBM freed, the next turn loads from host), one that pauses briefly
is held in HBM; counts computed by hand from the step costs of tests/sim/test_sim_tiers.py."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.policy.pause import PauseEstimator
from agentic_kvc.sim.blocks import BlockPool, BlockTable
from agentic_kvc.workload.model import Block, Request, Session, Workload
from tests.sim.test_sim_tiers import BLOCK, BS, HOST, _rec
from tests.sim.test_sim_tiers import run_fleet as _run

Z80 = NormalDist().inv_cdf(0.8)


def _workload(pause_s: float, churn: list[tuple[float, int]]) -> Workload:
    """A: three turns, 480 then 640 then 800 tokens (each extends the last), `pause_s`
    between them. Churn: one-off prompts (arrival, tokens) with one output token each."""
    a0 = Request("a0", "A", 0, 480, 2, (Block(1, 480),))
    a1 = Request(
        "a1", "A", 1, 640, 2, (Block(1, 480), Block(2, 160)), think_s=pause_s, parent_id="a0"
    )
    a2 = Request(
        "a2",
        "A",
        2,
        800,
        2,
        (Block(1, 480), Block(2, 160), Block(3, 160)),
        think_s=pause_s,
        parent_id="a1",
    )
    others = [
        Session(f"B{i}", [Request(f"b{i}", f"B{i}", 0, n, 1, (Block(100 + i, n),), arrival_s=t)])
        for i, (t, n) in enumerate(churn)
    ]
    return Workload([Session("A", [a0, a1, a2]), *others])


def test_estimator_by_hand() -> None:
    est = PauseEstimator(keep_max_s=30.0)
    first = est.hint("A")  # nothing seen: the prior, 5 s
    assert not first.demote
    assert first.keep_s == pytest.approx(5.0 * math.exp(Z80))
    est.finished("A", 1.0)
    assert est.arrived("A", 101.0) == pytest.approx(100.0)
    # fleet mu = (ln 5 + ln 100) / 2; A's = (fleet mu + ln 100) / 2
    median = math.exp((math.log(5) + 3 * math.log(100)) / 4)
    h = est.hint("A")
    assert h.demote and h.keep_s == 0.0 and h.predicted_s == pytest.approx(median)
    # another session, no pauses of its own: the fleet's mean, under 30 s: kept
    b = est.hint("B")
    assert not b.demote
    assert b.predicted_s == pytest.approx(math.sqrt(5 * 100))
    assert b.keep_s == 30.0  # exp(mu + z * 1.0) = 51.9 s, capped
    with pytest.raises(ValueError, match="quantile"):
        PauseEstimator(quantile=1.0)


def test_release_first_puts_blocks_at_the_head_of_the_free_queue() -> None:
    pool = BlockPool(8, BS)
    a, b = BlockTable(), BlockTable()
    pool.allocate(a, 2)
    pool.cache(a, 2, lambda lo, hi: [11, 12][lo:hi])
    pool.allocate(b, 2)
    pool.cache(b, 2, lambda lo, hi: [21, 22][lo:hi])
    pool.release(b)  # b is queued first (LRU: reused first) ...
    pool.release_first(a)  # ... but a, demoted, goes ahead of it
    assert pool.num_free == 8
    c = BlockTable()
    pool.allocate(c, 4 + 1)  # 4 never-used blocks, then a's tail
    assert pool.count_hit([11, 12]) == 1 and pool.count_hit([21, 22]) == 2


def test_a_long_pause_demotes_the_session() -> None:
    # a0: prefill 480 (0.49 s) + a decode (0.011): done 0.501; no pause seen: kept 11.6 s,
    # which expires in the 100 s pause: demoted then (its 30 prompt blocks written to host).
    # a1 at 100.501: the demoted blocks are still in HBM (nothing reused them): 480 hit,
    # prefill 160 (0.17) + decode: done 100.682. Its hint (one 100 s pause seen, median
    # 47 s > 30): demote. At its end 10 new blocks go to host (40 stored) and its 41 blocks
    # join the head of the free queue; HBM is free (sample at 101). B at 101.5 needs 60
    # blocks: 22 never used, then a1's unhashed one and 37 of its prompt's, tail first:
    # blocks 0-2 stay. a2 at 200.682: 3 blocks from HBM, 37 (592 tokens) from host, 160
    # recomputed; the load takes 2 ms + 37 blocks at 10 MB/s.
    wl = _workload(100.0, [(101.5, 960)])
    fleet = _run(wl, HOST, pause_aware=True)
    inst = fleet.instances[0]
    assert inst.demoted == {"turn_end": 1, "expired": 1}
    a1, a2 = _rec(fleet, "a1"), _rec(fleet, "a2")
    assert (a1.cached_tokens, a1.host_tokens) == (480, 0)
    assert a1.t_done == pytest.approx(100.682)
    assert (a2.cached_tokens, a2.host_tokens, a2.recomputed_tokens) == (48, 592, 160)
    assert a2.reload_wait_s == pytest.approx(0.002 + 37 * BLOCK / 0.01e9)
    at = {round(s.t, 6): s.kv_usage for s in fleet.samples}
    assert at[100.0] == pytest.approx(0.0) and at[101.0] == pytest.approx(0.0)
    # Plain LRU with the same host tier, for contrast: a1's blocks join the queue's tail,
    # behind a0's freed unhashed block, which B then reuses before them: one block more
    # stays in HBM (4), and the host holds the 36 B evicted (lazy offload).
    base = _run(wl, HOST)
    b2 = _rec(base, "a2")
    assert (b2.cached_tokens, b2.host_tokens) == (64, 576)
    assert base.instances[0].demoted == {"turn_end": 0, "expired": 0}
    # The keep half alone (pause_demote off): a0's expired hold and a1 (predicted long) are
    # released as vLLM releases: the same blocks as plain LRU.
    keep = _run(wl, HOST, pause_aware=True, pause_demote=False)
    assert keep.instances[0].demoted == {"turn_end": 0, "expired": 0}
    assert keep.instances[0].retained_releases["expired"] == 1
    k2 = _rec(keep, "a2")
    assert (k2.cached_tokens, k2.host_tokens) == (64, 576)


def test_a_short_pause_keeps_the_session_in_hbm() -> None:
    # Pauses of 2 s. a0 held 11.6 s; a1 at 2.501 hits its 30 blocks, done 2.682, hint: one
    # 2 s pause seen, median 5^.25 * 2^.75 = 2.5 s: held 2.5 * e^z = 5.8 s. B0 at 3.0 takes
    # 20 of the 22 never-used blocks, B1 at 4.0 the last 2, a0's unhashed one and 17 of B0's:
    # A's 41 held blocks untouched. a2 at 4.682: 40 blocks (640 tokens) from HBM.
    wl = _workload(2.0, [(3.0, 320), (4.0, 320)])
    fleet = _run(wl, HOST, pause_aware=True)
    inst = fleet.instances[0]
    assert inst.demoted == {"turn_end": 0, "expired": 0}
    assert inst.retained_releases["reused"] == 2
    a2 = _rec(fleet, "a2")
    assert (a2.cached_tokens, a2.host_tokens, a2.recomputed_tokens) == (640, 0, 160)
    # HBM only without retention: a1's blocks are the queue's oldest after a0's unhashed
    # one; B1 takes 2 never-used blocks, then those two unhashed ones and a1's prompt blocks
    # 24-39, tail first: a2 hits 24.
    base = _run(wl, {})
    assert _rec(base, "a2").cached_tokens == 24 * BS


def test_off_by_default_leaves_run_ids() -> None:
    on = load_config(
        {"backend": "sim", "workload": {"generator": {"sessions": 1}}, "sim": {"pause_aware": 1}}
    )
    off = load_config({"backend": "sim", "workload": {"generator": {"sessions": 1}}})
    assert "pause_aware" not in off.canonical()["sim"]
    assert on.canonical()["sim"]["pause_keep_max_s"] == 30.0
    assert on.run_id() != off.run_id()
