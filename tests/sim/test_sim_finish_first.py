"""Finished sessions first (sim.finish_first; docs/kv_tiers/pause_aware.md): when a session's
last turn ends, its blocks go to the head of HBM's free queue, so a later allocation takes
them before a paused session's older blocks. Block counts computed by hand on the one-instance,
64-block fleet of tests/sim/test_sim_tiers.py."""

from __future__ import annotations

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.workload.model import Block, Request, Session, Workload
from tests.sim.test_sim_tiers import BS, _rec, run_fleet


def _workload() -> Workload:
    """A pauses 5 s between a 480-token turn and a 640-token one extending it. F, a one-turn
    session (its turn is its last), prefills 320 tokens at 0.6 s (20 blocks, done at 0.93 s).
    C, another one-turn session, needs 40 blocks at 1.0 s while A pauses."""
    a0 = Request("a0", "A", 0, 480, 2, (Block(1, 480),))
    a1 = Request("a1", "A", 1, 640, 2, (Block(1, 480), Block(2, 160)), think_s=5.0, parent_id="a0")
    f = Request("f", "F", 0, 320, 1, (Block(7, 320),), arrival_s=0.6)
    c = Request("c", "C", 0, 640, 1, (Block(9, 640),), arrival_s=1.0)
    return Workload([Session("A", [a0, a1]), Session("F", [f]), Session("C", [c])])


@pytest.mark.parametrize("first", [False, True])
def test_a_finished_sessions_blocks_go_before_a_paused_ones(first: bool) -> None:
    # a0 ends at 0.501 holding 31 blocks (30 hashed, one for its second output token); F takes
    # 20 of the 33 never-used ones and ends at 0.93. C at 1.0 takes 40 free blocks from the
    # queue's head. LRU (first=False): the 13 never-used, a0's partial block, then 26 of a0's
    # from their tail: a0 keeps 4 (64 tokens). Finished first: F's 20 lead the queue, then
    # the 13 never-used, a0's partial and 6 of a0's: a0 keeps 24 (384 tokens).
    fleet = run_fleet(_workload(), {}, finish_first=first)
    assert _rec(fleet, "a1").cached_tokens == (24 if first else 4) * BS
    # The router's estimate is told of the release (RouterState.finish: F's and C's prompts
    # go to the front of its LRU), so it predicts what the engine holds.
    assert _rec(fleet, "a1").predicted_cached_tokens == (24 if first else 4) * BS
    # The last turns of A, F and C are released first; none without the option.
    assert fleet.instances[0].finished_first == (3 if first else 0)
    assert _rec(fleet, "f").cached_tokens == 0 and _rec(fleet, "c").cached_tokens == 0


def test_finish_first_enters_the_run_id_only_when_on() -> None:
    base = {"backend": "sim", "workload": {"generator": {"sessions": 1}}}
    off = load_config(base)
    assert "finish_first" not in off.canonical()["sim"]
    on = load_config(base, ["sim.finish_first=true"])
    assert on.canonical()["sim"]["finish_first"] is True and on.run_id() != off.run_id()
    assert "router_sees_release" not in on.canonical()["sim"]
    untold = load_config(base, ["sim.finish_first=true", "sim.router_sees_release=false"])
    assert untold.run_id() not in (on.run_id(), off.run_id())
    # Without finished-first (or pause-aware) eviction there is nothing to tell.
    assert load_config(base, ["sim.router_sees_release=false"]).run_id() == off.run_id()


def test_an_untold_router_predicts_plain_lru() -> None:
    """The ablation (`sim.router_sees_release: false`): the engine releases finished sessions
    first, the router's estimate still counts their blocks as the most recent, so it predicts
    a1's hit as vLLM's plain LRU would leave it (4 blocks) while the engine holds 24."""
    fleet = run_fleet(_workload(), {}, finish_first=True, router_sees_release=False)
    a1 = _rec(fleet, "a1")
    assert (a1.cached_tokens, a1.predicted_cached_tokens) == (24 * BS, 4 * BS)
