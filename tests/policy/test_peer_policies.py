"""Peer routers' rules (shared/notes/routing_anchors.md): imbalance and threshold rules."""

from __future__ import annotations

from collections import Counter

import pytest
from policy_helpers import fleet, req

from agentic_kvc.policy import get_policy


def test_sglang_imbalance_needs_both_abs_and_rel() -> None:
    pol = get_policy("sglang_cache_aware")
    # Instance 0 holds the whole prompt but is 70 requests ahead: abs 70 > 64, 80 > 1.5*10.
    d = pol.decide(req(1000), fleet(2, cached={0: 999}, num_requests=[80, 10]))
    assert (d.prefill, d.reason) == (1, "imbalanced")
    # abs gap 64 is not > 64: balanced, so the cache decides.
    d = pol.decide(req(1000), fleet(2, cached={0: 999}, num_requests=[74, 10]))
    assert (d.prefill, d.reason) == (0, "cache_hit")
    # abs 100 > 64 but 300 <= 1.5 * 200: balanced by the relative rule.
    d = pol.decide(req(1000), fleet(2, cached={0: 999}, num_requests=[300, 200]))
    assert (d.prefill, d.reason) == (0, "cache_hit")


def test_sglang_cache_threshold() -> None:
    pol = get_policy("sglang_cache_aware")
    d = pol.decide(req(1000), fleet(2, cached={0: 310}, num_requests=[5, 1]))
    assert (d.prefill, d.reason) == (0, "cache_hit")  # 0.31 > 0.3
    d = pol.decide(req(1000), fleet(2, cached={0: 300}, num_requests=[5, 1]))
    assert (d.prefill, d.reason) == (1, "cache_miss")  # 0.30 is not above: least loaded


def test_llmd_weighted_scores() -> None:
    pol = get_policy("llmd_weighted")
    # 1000-token prompt = 62 blocks of 16; instance 1 holds 62 blocks (prefix score 1.0).
    f = fleet(3, cached={1: 992}, num_requests=[0, 3, 1], decode_requests=[0, 0, 0])
    d = pol.decide(req(1000), f)
    # queue: q = [0, 3, 1] -> [1, 0, 2/3]; KV unknown -> 1 each; prefix [0, 1, 0]
    assert d.scores[0] == pytest.approx(2 * 1 + 2 + 0)
    assert d.scores[1] == pytest.approx(2 * 0 + 2 + 3)
    assert d.scores[2] == pytest.approx(2 * (2 / 3) + 2 + 0)
    assert d.prefill == 1


def test_llmd_uses_fresh_scrapes_only() -> None:
    pol = get_policy("llmd_weighted", {"max_scrape_age_s": 5})
    f = fleet(2, kv_usage=[0.9, 0.1], scrape_age_s=[1.0, 1.0], engine_waiting=[0, 0])
    assert pol.decide(req(), f).prefill == 1  # KV scorer: 0.2 vs 1.8
    stale = fleet(2, kv_usage=[0.9, 0.1], scrape_age_s=[9.0, 9.0], engine_waiting=[0, 0])
    d = pol.decide(req(), stale)
    assert d.scores[0] == d.scores[1]  # stale KV ignored: equal scores


def test_llmd_affinity_filter_and_exploration() -> None:
    # Instance 0 has the prefix (score 1.0) but the longer queue. Default weights: 0 + 2 + 3
    # beats 2 + 2 + 0. With prefix weight 1, the queue wins (3 < 4) unless the filter keeps
    # only prefix holders.
    shape = {"cached": {0: 992}, "engine_waiting": [10, 0], "scrape_age_s": [0.0, 0.0]}
    assert get_policy("llmd_weighted").decide(req(1000), fleet(2, **shape)).prefill == 0
    no_filter = get_policy("llmd_weighted", {"prefix_weight": 1.0})
    assert no_filter.decide(req(1000), fleet(2, **shape)).prefill == 1
    sticky = get_policy("llmd_weighted", {"prefix_weight": 1.0, "affinity_filter": True})
    d = sticky.decide(req(1000), fleet(2, **shape))
    assert (d.prefill, d.reason) == (0, "weighted_affinity")
    explore = get_policy(
        "llmd_weighted", {"prefix_weight": 1.0, "affinity_filter": True, "explore_rate": 1.0}
    )
    d = explore.decide(req(1000), fleet(2, **shape))
    assert (d.prefill, d.reason) == (1, "weighted_explore")


def test_dynamo_kv_linear_cost() -> None:
    pol = get_policy("dynamo_kv")
    # 160-token prompt = 10 blocks. cost = max(pending/16 + 10 - overlap, 0) + decode/16
    f = fleet(3, cached={0: 160}, pending_prefill_tokens=[320, 0, 0], decode_tokens=[0, 160, 0])
    d = pol.decide(req(160), f)
    # cached capped at input-1 = 159 -> overlap 9.9375 blocks
    assert d.scores[0] == pytest.approx(20 + 10 - 159 / 16)
    assert d.scores[1] == pytest.approx(10 + 10)
    assert d.scores[2] == pytest.approx(10)
    assert d.prefill == 2


def test_dynamo_lmetric_plus_one_avoids_idle_pinning() -> None:
    pol = get_policy("dynamo_lmetric")
    f = fleet(2, cached={0: 800}, decode_tokens=[0, 0])
    d = pol.decide(req(1000), f)
    # prefill blocks x (decode blocks + 1): with no decode anywhere the cache still counts.
    assert d.scores[0] < d.scores[1] and d.prefill == 0


def test_dynamo_temperature_is_seeded() -> None:
    f = fleet(4, pending_prefill_tokens=[0, 100, 200, 300])
    draws = [
        [get_policy("dynamo_kv", {"temperature": 1.0, "seed": 7}).decide(req(), f).prefill]
        for _ in range(2)
    ]
    assert draws[0] == draws[1]
    pol = get_policy("dynamo_kv", {"temperature": 5.0, "seed": 1})
    assert len(Counter(pol.decide(req(), f).prefill for _ in range(200))) > 1


def test_conditional_disagg_threshold_rules() -> None:
    pol = get_policy("conditional_disagg")
    # D = instance 0 (holds 9k of a 10k prompt): effective 1k < 2048 and 0.1 < 0.7 -> local.
    d = pol.decide(req(10_000), fleet(2, cached={0: 9_000}))
    assert (d.prefill, d.decode, d.reason) == (0, 0, "local_small_prefill")
    # A cold 10k prompt: effective 10k -> remote prefill on the other instance.
    d = pol.decide(req(10_000), fleet(2, decode_tokens=[0, 50]))
    assert (d.prefill, d.decode, d.reason) == (1, 0, "remote_prefill")
    assert d.route_class == "MEDIUM_P2P"
    # Small but mostly uncached: 1.5k of 2k is 0.75 >= 0.7 -> remote.
    d = pol.decide(req(2_000), fleet(2, cached={0: 500}, decode_tokens=[0, 50]))
    assert d.reason == "remote_prefill"
    # Prefill instance busy -> stay local.
    busy = fleet(2, pending_prefill_tokens=[0, 20_000], decode_tokens=[0, 0])
    assert pol.decide(req(10_000), busy).reason == "prefill_busy"


def test_conditional_disagg_decode_only_instance_always_remote() -> None:
    pol = get_policy("conditional_disagg")
    f = fleet(2, role=["prefill", "decode"], cached={1: 9_000})
    d = pol.decide(req(10_000), f)
    assert (d.prefill, d.decode, d.reason) == (0, 1, "remote_prefill")


def test_consistent_hash_sticky_and_minimal_movement() -> None:
    pol = get_policy("consistent_hash")
    f = fleet(8)
    home = {s: pol.decide(req(session=f"s{s}"), f).prefill for s in range(200)}
    assert home == {s: pol.decide(req(session=f"s{s}"), f).prefill for s in range(200)}
    assert len(set(home.values())) == 8
    f.instances[3].healthy = False
    moved = {s: pol.decide(req(session=f"s{s}"), f).prefill for s in range(200)}
    assert all(moved[s] == home[s] for s in home if home[s] != 3)
    assert all(moved[s] != 3 for s in moved)


def test_least_loaded() -> None:
    pol = get_policy("least_loaded")
    f = fleet(3, num_requests=[2, 1, 1], pending_prefill_tokens=[0, 500, 100])
    assert pol.decide(req(), f).prefill == 2


def test_aibrix_best_match_within_the_load_bound() -> None:
    pol = get_policy("aibrix_prefix_cache")
    # 1000 tokens = 62 blocks of 16. Instance 0 matches 100%, instance 1 50%.
    shape = {"cached": {0: 992, 1: 496}}
    d = pol.decide(req(1000), fleet(3, **shape, num_requests=[1, 1, 1]))
    assert (d.prefill, d.reason) == (0, "prefix_match")
    assert d.scores == {0: 100, 1: 50, 2: 0}
    # loads [5, 1, 0]: mean 2, population std 2.16, bound 4.16: instance 0 is over it, the
    # next-best match, instance 1, is within it
    d = pol.decide(req(1000), fleet(3, **shape, num_requests=[5, 1, 0]))
    assert (d.prefill, d.reason) == (1, "prefix_match")
    # no match anywhere: the least loaded
    d = pol.decide(req(1000), fleet(3, num_requests=[2, 1, 3]))
    assert (d.prefill, d.reason) == (1, "least_request_fallback")


def test_aibrix_load_gate_restricts_matching_to_the_least_loaded() -> None:
    pol = get_policy("aibrix_prefix_cache")
    # busiest 20 > 2 x (mean 7 + 1) and 20 - 0 >= 8: only instance 2 (0 requests) may match
    shape = {"cached": {0: 992, 2: 160}}
    d = pol.decide(req(1000), fleet(3, **shape, num_requests=[20, 1, 0]))
    assert (d.prefill, d.reason) == (2, "prefix_match")
    # gap 7 < 8: no gate, but instance 0 (9 requests) is above mean + std: instance 2 again
    d = pol.decide(req(1000), fleet(3, **shape, num_requests=[9, 1, 2]))
    assert d.prefill == 2
    # the gate leaves only non-matching instances: the least loaded of all
    d = pol.decide(req(1000), fleet(3, cached={0: 992}, num_requests=[20, 1, 0]))
    assert (d.prefill, d.reason) == (2, "least_request_fallback")


def test_production_stack_picks_among_the_longest_matches_only() -> None:
    pol = get_policy("production_stack_prefix")
    shape = {"cached": {0: 992, 1: 992, 2: 480}, "num_requests": [50, 60, 0, 0]}
    picks = Counter(pol.decide(req(1000), fleet(4, **shape)).prefill for _ in range(200))
    assert set(picks) == {0, 1} and min(picks.values()) > 60  # random, load ignored
    picks = Counter(pol.decide(req(1000), fleet(4)).prefill for _ in range(400))
    assert set(picks) == {0, 1, 2, 3}  # nothing matches: any instance
    d = pol.decide(req(1000), fleet(4, cached={3: 16}))
    assert (d.prefill, d.reason) == (3, "longest_match")
    # seeded: a new policy with the same seed draws the same
    draws = [get_policy("production_stack_prefix") for _ in range(2)]
    assert len({tuple(p.decide(req(), fleet(4)).prefill for _ in range(20)) for p in draws}) == 1
