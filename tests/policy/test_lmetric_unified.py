"""LMetric, the hybrid (unified) and Approach A (additive): seed 003's rules."""

from __future__ import annotations

from collections import Counter

import pytest
from policy_helpers import fleet, req

from agentic_kvc.policy import get_policy
from agentic_kvc.policy.common import lmetric_score


@pytest.mark.parametrize("name", ["lmetric", "unified", "additive", "dynamo_lmetric"])
def test_all_idle_fleet_spreads_new_sessions(name: str) -> None:
    pol = get_policy(name)
    f = fleet(4)
    picks = Counter(pol.decide(req(session=f"new{k}"), f).prefill for k in range(8))
    assert picks == {0: 2, 1: 2, 2: 2, 3: 2}


def test_lmetric_picks_min_score() -> None:
    pol = get_policy("lmetric")
    # scores: (pending + uncached) * requests = (0+1000)*3, (5000+1000)*1, (0+400)*2
    f = fleet(3, cached={2: 600}, num_requests=[3, 1, 2], pending_prefill_tokens=[0, 5000, 0])
    d = pol.decide(req(1000), f)
    assert d.prefill == d.decode == 2
    assert d.scores == {0: 3000, 1: 6000, 2: 800}
    assert d.reason == "lmetric"
    assert d.predicted_cached_tokens == 600


def test_lmetric_tie_breaks_by_uncached_then_requests() -> None:
    pol = get_policy("lmetric")
    # All scores 0 (no requests anywhere): the instance holding more of the prompt wins.
    assert pol.decide(req(1000), fleet(3, cached={1: 200, 2: 500})).prefill == 2
    # Equal non-zero scores, (0 + 500) * 2 == (0 + 1000) * 1: fewer uncached tokens wins.
    f = fleet(2, cached={0: 500}, num_requests=[2, 1])
    assert lmetric_score(f.instances[0], 500) == lmetric_score(f.instances[1], 1000)
    assert pol.decide(req(1000), f).prefill == 0
    # Equal scores and uncached tokens: fewer requests wins, whatever the round-robin says.
    f = fleet(3, num_requests=[2, 1, 2], pending_prefill_tokens=[0, 1000, 0])
    for _ in range(3):
        assert pol.decide(req(1000), f).prefill == 1


def test_lmetric_avoids_unhealthy_and_roles() -> None:
    pol = get_policy("lmetric")
    f = fleet(3, healthy=[False, True, True], role=["combined", "decode", "combined"])
    for _ in range(5):
        d = pol.decide(req(), f)
        assert d.prefill == d.decode == 2


def _affinity_fleet(cached_ratio_tokens: int, owner_requests: int = 1):
    # Owner 0 holds `cached_ratio_tokens` of a 1000-token prompt; others are idle and cold.
    return fleet(
        4,
        cached={0: cached_ratio_tokens},
        affinity={"s": 0},
        num_requests=[owner_requests, 1, 1, 1],
        pending_prefill_tokens=[0, 0, 0, 0],
    )


def test_unified_affinity_gate_holds_at_051_releases_at_049() -> None:
    pol = get_policy("unified")
    # Make LMetric prefer another instance so that only the gate can send us to 0:
    # owner has 5 requests (avg = 2, 5 <= 2*2? no) -> use 3 requests: avg 1.5, 3 <= 3 ok.
    held = pol.decide(req(1000), _affinity_fleet(510, owner_requests=3))
    assert (held.prefill, held.reason) == (0, "affinity")
    # the receipt scores every candidate, not only the one affinity chose
    assert set(held.scores) == {0, 1, 2, 3}
    assert held.scores[0]["cache_ratio"] == 0.51 and held.scores[0]["avg_requests"] == 1.5
    assert held.scores[1] == {"cache_ratio": 0.0, "num_requests": 1}
    released = pol.decide(req(1000), _affinity_fleet(490, owner_requests=3))
    assert released.reason == "lmetric"
    # LMetric: owner (1000-490)*3 = 1530 vs others 1000*1 -> elsewhere.
    assert released.prefill != 0


def test_unified_overload_gate_requests_rule() -> None:
    """The seed's gate 2: owner.num_requests <= avg * 2.0. Others have 1 request each, so with
    the owner at r the average is (r+3)/4: r = 3 passes (3 <= 3.0), r = 4 fails (4 > 3.5)."""
    pol = get_policy("unified", {"overload_test": "requests"})
    at_limit = fleet(4, cached={0: 900}, affinity={"s": 0}, num_requests=[3, 1, 1, 1])
    assert pol.decide(req(1000), at_limit).reason == "affinity"
    over = fleet(4, cached={0: 900}, affinity={"s": 0}, num_requests=[4, 1, 1, 1])
    d = pol.decide(req(1000), over)
    assert d.reason == "lmetric_overloaded_affinity"
    assert d.prefill != 0


def test_unified_without_affinity_is_lmetric() -> None:
    uni, lm = get_policy("unified"), get_policy("lmetric")
    f = fleet(3, cached={1: 700}, num_requests=[1, 2, 0], pending_prefill_tokens=[0, 300, 50])
    a, b = uni.decide(req(1000, session="fresh"), f), lm.decide(req(1000, session="fresh"), f)
    assert (a.prefill, a.scores) == (b.prefill, b.scores)


@pytest.mark.parametrize("uncached_blocks", [0, 1])
def test_hybrid_high_cache_breaks_on_overload(uncached_blocks: int) -> None:
    """The design log's open edge case: the affinity instance is overloaded and holds the
    whole prompt (or all but one block). LMetric alone re-elects it, because its uncached
    term is ~0; the hard request ceiling must send the request elsewhere."""
    prompt = 4096
    cached = prompt - 16 * uncached_blocks
    # Owner 0: 8 in flight, nothing pending; others: 2 in flight each -> avg 3.5, 8 > 7.
    shape = {
        "cached": {0: cached},
        "affinity": {"s": 0},
        "num_requests": [8, 2, 2, 2],
    }
    seed_gate = {"overload_test": "requests"}
    without = get_policy("unified", {**seed_gate, "request_ceiling": None}).decide(
        req(prompt), fleet(4, **shape)
    )
    assert without.reason == "lmetric_overloaded_affinity"
    assert without.prefill == 0, "the seed's behaviour: the fallback re-elects the owner"
    with_ceiling = get_policy("unified", seed_gate).decide(req(prompt), fleet(4, **shape))
    assert with_ceiling.reason == "lmetric_overloaded_affinity"
    assert with_ceiling.prefill != 0


def _owner_busier(prompt: int, uncached: int, owner_pending: int = 0):
    # Owner 0 holds all but `uncached` tokens and runs 4 requests; three idle-ish peers run 1.
    return fleet(
        4,
        cached={0: prompt - uncached},
        affinity={"s": 0},
        num_requests=[4, 1, 1, 1],
        pending_prefill_tokens=[owner_pending, 0, 0, 0],
    )


def test_unified_cost_gate_charges_the_move_for_the_prefix_it_recomputes() -> None:
    """4 requests on the owner vs 1 elsewhere (avg 1.75): the requests rule moves the session,
    recomputing 48k cached tokens; the cost rule compares (pending + uncached) x (requests + 1):
    owner (0 + 2k) x 5 = 10k against 50k x 2 = 100k elsewhere, and stays."""
    f = _owner_busier(50_000, 2_000)
    d = get_policy("unified").decide(req(50_000), f)
    assert (d.prefill, d.reason) == (0, "affinity")
    moved = get_policy("unified", {"overload_test": "requests"}).decide(req(50_000), f)
    assert (moved.reason, moved.prefill != 0) == ("lmetric_overloaded_affinity", True)


def test_unified_cost_gate_leaves_a_queued_owner_and_scales_with_the_prompt() -> None:
    pol = get_policy("unified")
    # A queue ahead on the owner: (60k + 2k) x 5 = 310k > 2 x 100k -> leave it.
    d = pol.decide(req(50_000), _owner_busier(50_000, 2_000, owner_pending=60_000))
    assert d.reason == "lmetric_overloaded_affinity" and d.prefill != 0
    # The same owner (10k queued, 1k uncached: cost 55k) keeps a 50k-token session (moving
    # costs 100k) but not a 5k-token one (moving costs 10k): what staying saves scales with
    # the prefix a move would recompute.
    stay = pol.decide(req(50_000), _owner_busier(50_000, 1_000, owner_pending=10_000))
    assert (stay.prefill, stay.reason) == (0, "affinity")
    move = pol.decide(req(5_000), _owner_busier(5_000, 1_000, owner_pending=10_000))
    assert move.reason == "lmetric_overloaded_affinity" and move.prefill != 0


def test_unified_ceiling_keeps_a_single_instance_fleet_served() -> None:
    d = get_policy("unified").decide(req(), fleet(1, num_requests=[50]))
    assert d.prefill == 0


def test_additive_cost_and_gates() -> None:
    pol = get_policy("additive")
    # cost = n*0.05 + pending/7000 + uncached/7000
    f = fleet(2, num_requests=[0, 2], pending_prefill_tokens=[7000, 0])
    d = pol.decide(req(7000, session=None), f)
    assert d.scores[0] == pytest.approx(2.0)
    assert d.scores[1] == pytest.approx(1.1)
    assert d.prefill == 1 and d.reason == "cost"
    # Affinity to 0 with cost 2.0 <= 1.1*2 and load (7000) <= avg (3500)*2: both gates pass.
    f = fleet(2, affinity={"s": 0}, num_requests=[0, 2], pending_prefill_tokens=[7000, 0])
    assert pol.decide(req(7000), f).reason == "affinity"
    # Owner far more loaded: gate 1 (ongoing tokens) fails.
    f = fleet(2, affinity={"s": 0}, num_requests=[0, 2], pending_prefill_tokens=[70000, 0])
    d = pol.decide(req(7000), f)
    assert (d.prefill, d.reason) == (1, "cost_affinity_gated")
