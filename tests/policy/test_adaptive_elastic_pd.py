"""Adaptive offload (seed 002), elastic offload (seed 000) and static xPyD pools."""

from __future__ import annotations

import pytest
from policy_helpers import fleet, req
from pydantic import ValidationError

from agentic_kvc.policy import get_policy
from agentic_kvc.policy.base import NoHealthyInstance
from agentic_kvc.policy.common import ClassParams, classify

T = 20_000


def test_classify_boundaries() -> None:
    assert classify(T - 1, 0) == "MEDIUM"
    assert classify(T, 0) == "HEAVY"
    assert classify(4_999, 0) == "WARM"  # new < 5k
    assert classify(5_000, 0) == "MEDIUM"
    assert classify(100_000, 50_001) == "WARM"  # hit ratio > 0.5 wins over new >= T
    assert classify(100_000, 50_000) == "HEAVY"
    with pytest.raises(ValidationError):
        ClassParams(heavy_threshold=1000, warm_max_new_tokens=5000)


def _decode_busy_fleet():
    # Instance 0: idle; 1: decoding heavily; 2: some prefill queued, no decode.
    return fleet(
        3,
        decode_tokens=[0, 50_000, 0],
        decode_requests=[0, 4, 0],
        num_requests=[0, 4, 1],
        pending_prefill_tokens=[0, 0, 3_000],
    )


@pytest.mark.parametrize("version", [1, 2])
def test_adaptive_threshold_t_minus_1_and_t(version: int) -> None:
    pol = get_policy("adaptive", {"version": version})
    below = pol.decide(req(T - 1, session=None), _decode_busy_fleet())
    assert below.route_class == "MEDIUM"
    assert below.reason == "cache_lb" and not below.disaggregated
    at = pol.decide(req(T, session=None), _decode_busy_fleet())
    if version == 1:
        assert (at.route_class, at.reason) == ("HEAVY_COLO", "heavy_least_decode")
        assert at.prefill == at.decode and at.decode in (0, 2)
    else:
        assert (at.route_class, at.reason) == ("HEAVY_P2P", "heavy_offload")
        assert at.disaggregated


def test_adaptive_threshold_is_a_parameter() -> None:
    pol = get_policy("adaptive", {"heavy_threshold": 10_000})
    assert pol.decide(req(10_000, session=None), fleet(2)).route_class == "HEAVY_COLO"
    assert pol.decide(req(9_999, session=None), fleet(2)).route_class == "MEDIUM"


def test_adaptive_v1_heavy_goes_to_least_decode_load() -> None:
    pol = get_policy("adaptive", {"version": 1})
    f = fleet(3, decode_tokens=[9_000, 100, 5_000], num_requests=[1, 1, 1])
    for _ in range(3):
        assert pol.decide(req(30_000, session=None), f).prefill == 1


def test_adaptive_v2_prefill_elsewhere_decode_on_cache() -> None:
    pol = get_policy("adaptive", {"version": 2})
    # 40k prompt, 10k cached on instance 2: 30k new -> HEAVY; D = the cache/LB choice (2),
    # P = the least-loaded other instance (1: instance 0 has 5k pending).
    f = fleet(3, cached={2: 10_000}, pending_prefill_tokens=[5_000, 0, 0])
    d = pol.decide(req(40_000, session=None), f)
    assert (d.decode, d.prefill, d.route_class) == (2, 1, "HEAVY_P2P")
    # Classification uses the best estimate: 25k cached of 40k is WARM -> colocated.
    f = fleet(3, cached={2: 25_000})
    d = pol.decide(req(40_000, session=None), f)
    assert (d.prefill, d.decode, d.route_class) == (2, 2, "WARM")


# --- elastic: the four key properties of seed 000 -----------------------------------------


def _elastic_fleet(d_decoding: bool, p_load: int):
    # D = instance 0 (session affinity), P candidates 1 and 2 (2 is busier).
    return fleet(
        3,
        affinity={"s": 0},
        decode_tokens=[30_000 if d_decoding else 0, 0, 0],
        decode_requests=[3 if d_decoding else 0, 0, 0],
        num_requests=[3 if d_decoding else 0, 0, 1],
        pending_prefill_tokens=[0, p_load, p_load + 40_000],
    )


@pytest.mark.parametrize("mode", ["heuristic", "cost"])
def test_elastic_heavy_p_idle_d_busy_offloads(mode: str) -> None:
    d = get_policy("elastic", {"mode": mode}).decide(req(60_000), _elastic_fleet(True, 0))
    assert (d.prefill, d.decode) == (1, 0)
    assert (d.route_class, d.reason) == ("HEAVY_P2P", "p_idle_d_busy")


@pytest.mark.parametrize("mode", ["heuristic", "cost"])
def test_elastic_heavy_p_busy_colocates(mode: str) -> None:
    d = get_policy("elastic", {"mode": mode}).decide(req(60_000), _elastic_fleet(True, 80_000))
    assert (d.prefill, d.decode) == (0, 0)
    assert (d.route_class, d.reason) == ("HEAVY_COLO", "p_overloaded")


@pytest.mark.parametrize("mode", ["heuristic", "cost"])
def test_elastic_heavy_d_idle_colocates(mode: str) -> None:
    d = get_policy("elastic", {"mode": mode}).decide(req(60_000), _elastic_fleet(False, 0))
    assert (d.prefill, d.decode) == (0, 0)
    assert (d.route_class, d.reason) == ("HEAVY_COLO", "d_idle")


@pytest.mark.parametrize("prompt,klass", [(3_000, "WARM"), (15_000, "MEDIUM")])
def test_elastic_warm_and_medium_colocate(prompt: int, klass: str) -> None:
    d = get_policy("elastic").decide(req(prompt), _elastic_fleet(True, 0))
    assert (d.prefill, d.decode) == (0, 0)
    assert (d.route_class, d.reason) == (klass, "below_threshold")


def test_elastic_heuristic_p_above_average_colocates() -> None:
    # D decodes 95k tokens; both peers have 90k pending: P < D, and the fleet average is
    # 91.7k, so P is below 1.5x average (offload) but above 0.9x average (overloaded).
    f = fleet(
        3,
        affinity={"s": 0},
        decode_tokens=[95_000, 0, 0],
        decode_requests=[2, 0, 0],
        pending_prefill_tokens=[0, 90_000, 90_000],
    )
    assert get_policy("elastic").decide(req(60_000), f).reason == "p_idle_d_busy"
    strict = get_policy("elastic", {"p_overload_factor": 0.9})
    assert strict.decide(req(60_000), f).reason == "p_overloaded"


def test_elastic_cost_form_tradeoff() -> None:
    # benefit = 60k/7000*0.5 = 4.29 s; cost = P.ongoing/7000 + 0.5.
    pol = get_policy("elastic", {"mode": "cost"})
    assert pol.decide(req(60_000), _elastic_fleet(True, 25_000)).reason == "p_idle_d_busy"
    assert pol.decide(req(60_000), _elastic_fleet(True, 27_000)).reason == "p_overloaded"


# --- static PD ------------------------------------------------------------------------------


def test_static_pd_pools_from_params() -> None:
    pol = get_policy("static_pd", {"prefill": [0, 1, 2, 3, 4, 5], "decode": [6, 7]})
    f = fleet(8, pending_prefill_tokens=[9, 9, 1, 9, 9, 9, 0, 0], decode_tokens=[0] * 6 + [5, 2])
    d = pol.decide(req(), f)
    assert (d.prefill, d.decode, d.reason) == (2, 7, "pools_params")
    assert d.disaggregated and d.route_class == "WARM_P2P"


def test_static_pd_pools_from_roles_and_fraction() -> None:
    pol = get_policy("static_pd")
    roles = ["prefill", "decode", "prefill", "decode"]
    d = pol.decide(req(), fleet(4, role=roles))
    assert roles[d.prefill] == "prefill" and roles[d.decode] == "decode"
    seen = {(pol.decide(req(), fleet(8)).prefill) for _ in range(12)}
    assert seen == set(range(6))  # 6P + 2D by the default fraction, round-robin among equals
    assert all(pol.decide(req(), fleet(8)).decode in (6, 7) for _ in range(4))


def test_static_pd_bad_params() -> None:
    with pytest.raises(ValueError, match="or neither"):
        get_policy("static_pd", {"prefill": [0, 1]})
    with pytest.raises(ValueError, match="both pools"):
        get_policy("static_pd", {"prefill": [0, 1], "decode": [1]})
    with pytest.raises(ValueError, match="out of range"):
        get_policy("static_pd", {"prefill": [0], "decode": [9]}).decide(req(), fleet(2))


def test_static_pd_pool_down_falls_back() -> None:
    pol = get_policy("static_pd", {"prefill": [0], "decode": [1]})
    d = pol.decide(req(), fleet(3, healthy=[False, True, True]))
    assert d.prefill != 0 and "prefill_pool_down" in d.reason
    with pytest.raises(NoHealthyInstance):
        pol.decide(req(), fleet(2, healthy=[False, False]))
