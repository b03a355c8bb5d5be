"""The policy registry: one module per policy, every policy registered, parameters validated
with errors that name the field."""

from __future__ import annotations

import importlib

import pytest
from policy_helpers import fleet, req

from agentic_kvc.policy import get_policy, list_policies, validate_policy
from agentic_kvc.policy.registry import POLICY_MODULES

ISSUE_POLICIES = {
    "round_robin",
    "lmetric",
    "unified",
    "additive",
    "adaptive",
    "elastic",
    "static_pd",
    "sglang_cache_aware",
    "llmd_weighted",
    "dynamo_kv",
    "dynamo_lmetric",
    "conditional_disagg",
    "consistent_hash",
    "least_loaded",
}


def test_every_policy_of_the_issue_is_registered_from_its_own_module() -> None:
    registered = list_policies()
    assert set(registered) >= ISSUE_POLICIES
    for name, cls in registered.items():
        if not cls.__module__.startswith("agentic_kvc."):
            continue  # other tests register their own test policies in the same process
        module = cls.__module__.rsplit(".", 1)[-1]
        assert module in POLICY_MODULES, name
        assert importlib.import_module(cls.__module__).__dict__[cls.__name__] is cls
        assert cls.description, f"{name} has no description for `akvc policies`"


@pytest.mark.parametrize(
    "name,params,field",
    [
        ("unified", {"overload_factor": -1}, "policy.params.overload_factor"),
        ("unified", {"overlaod_factor": 2.0}, "policy.params.overlaod_factor"),
        ("adaptive", {"version": 3}, "policy.params.version"),
        ("adaptive", {"heavy_threshold": 1000, "warm_max_new_tokens": 5000}, "policy.params"),
        ("elastic", {"mode": "always"}, "policy.params.mode"),
        ("sglang_cache_aware", {"cache_threshold": 1.5}, "policy.params.cache_threshold"),
        ("round_robin", {"anything": 1}, "policy.params.anything"),
    ],
)
def test_bad_parameters_name_the_field(name: str, params: dict, field: str) -> None:
    with pytest.raises(ValueError) as err:
        validate_policy(name, params)
    assert f"field '{field}" in str(err.value)
    with pytest.raises(ValueError):
        get_policy(name, params)


def test_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"field 'policy\.name': unknown policy 'nope'.*lmetric"):
        get_policy("nope")


@pytest.mark.parametrize(
    "name",
    sorted(
        ISSUE_POLICIES - {"round_robin", "consistent_hash"}  # nothing compared: a ring or a counter
    ),
)
def test_receipt_scores_cover_every_instance_compared(name: str) -> None:
    """A fresh session (no affinity), one unhealthy instance: the receipt scores every healthy
    instance and no other, so a record shows what the choice was made against."""
    f = fleet(
        4,
        cached={0: 600, 2: 300},
        healthy=[True, True, False, True],
        num_requests=[2, 1, 0, 3],
        pending_prefill_tokens=[100, 0, 0, 900],
        decode_requests=[1, 1, 0, 2],
        decode_tokens=[3000, 500, 0, 8000],
    )
    d = get_policy(name).decide(req(1000, session="fresh"), f)
    assert set(d.scores) == {0, 1, 3}, d.scores


def test_a_policy_whose_params_cannot_judge_a_fleet_is_refused_at_registration() -> None:
    """A run config asks every policy's parameters whether they fit the fleet
    (`fleet_problem`), so a Params class outside PolicyParams would fail there instead."""
    from pydantic import BaseModel

    from agentic_kvc.policy.base import Policy
    from agentic_kvc.policy.registry import register

    class Loose(BaseModel):
        x: int = 0

    class LoosePolicy(Policy):
        name = "loose_params_test"
        Params = Loose  # type: ignore[assignment]

    with pytest.raises(TypeError, match="PolicyParams"):
        register(LoosePolicy)
    assert "loose_params_test" not in list_policies()


def test_every_registered_policy_answers_for_its_fleet() -> None:
    for name, cls in list_policies().items():
        assert cls.Params().fleet_problem(8) is None, name  # the defaults fit any fleet
    pools = validate_policy("static_pd", {"prefill": [0, 1], "decode": [9]})
    assert pools.fleet_problem(10) is None
    assert "[9] out of range for a fleet of 8" in pools.fleet_problem(8)
