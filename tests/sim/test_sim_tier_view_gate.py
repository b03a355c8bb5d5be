"""A policy that never asks for tiers (`Policy.uses_tier_view` False) gets the HBM estimate
alone in the simulator: the router's model of the tiers is not kept, and its records are
those of a run that keeps it (the model is work, not a decision, for such a policy), but for
what the kept model expected from each tier (`predicted_host_tokens`, `predicted_disk_tokens`),
which a record carries only when the router models the tiers."""

from __future__ import annotations

import pytest

from agentic_kvc.cache.chain_index import ChainedPrefixIndex
from agentic_kvc.cache.tier_index import TieredPrefixIndex
from agentic_kvc.config import load_config
from agentic_kvc.policy.registry import get_policy
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload

SETS = [
    "fleet.instances=2",
    "workload.generator.sessions=6",
    "fleet.kv_cache_tokens=160000",
    "fleet.kv_tiers.host_gib=4",
]


def _run(policy: str) -> SimFleet:
    config = load_config("config/runs/sim_h20_agentic_long.yaml", [*SETS, f"policy.name={policy}"])
    fleet = SimFleet(config, load_workload(config.workload, config.seed), _profile(config))
    fleet.run()
    return fleet


def _profile(config):  # type: ignore[no-untyped-def]
    from agentic_kvc.sim.run_backend import profile_for

    return profile_for(config)


@pytest.mark.parametrize("policy", ["round_robin", "sglang_cache_aware", "sticky_least_loaded"])
def test_a_tier_blind_policy_keeps_no_tier_model_and_the_same_records(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert get_policy(policy).uses_tier_view is False
    fast = _run(policy)
    assert type(fast.state.cache) is ChainedPrefixIndex
    assert fast.stats.reloads > 0  # the engine's tiers are on and used
    monkeypatch.setattr(type(get_policy(policy)), "uses_tier_view", True)
    full = _run(policy)
    assert isinstance(full.state.cache, TieredPrefixIndex)
    expected = ("predicted_host_tokens", "predicted_disk_tokens")
    assert all(not set(expected) & r.to_dict().keys() for r in fast.records)
    assert any(r.predicted_host_tokens is not None for r in full.records)
    without = [{k: v for k, v in r.to_dict().items() if k not in expected} for r in full.records]
    assert [r.to_dict() for r in fast.records] == without


def test_a_policy_that_reads_tiers_keeps_the_model() -> None:
    assert get_policy("dynamo_kv").uses_tier_view is True
    assert isinstance(_run("dynamo_kv").state.cache, TieredPrefixIndex)
