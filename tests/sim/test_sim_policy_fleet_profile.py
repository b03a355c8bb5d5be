"""A simulated fleet hands a policy its own hardware, model and step budget where the policy
has such a parameter and the config leaves it unset (sim/fleet.py `policy_params`): otherwise
predicted_ttft would price an H100 fleet's steps and a Llama model's KV bytes with the design
testbed's H20 / Qwen3-Coder profile, silently."""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.config import load_config
from agentic_kvc.policy.predicted_ttft import fitted_cost
from agentic_kvc.policy.registry import with_fleet_defaults
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload.load import load_workload

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "config/runs/sim_h20_agentic_long.yaml"
FLEET = ['fleet.hardware="h100"', 'fleet.model="llama-3.1-8b"', "fleet.max_num_batched_tokens=4096"]


def _fleet(*sets: str) -> SimFleet:
    cfg = load_config(BASE, [*FLEET, "workload.generator.sessions=2", *sets])
    return SimFleet(cfg, load_workload(cfg.workload, cfg.seed), profile_for(cfg))


def test_predicted_ttft_fits_the_profile_the_fleet_runs() -> None:
    policy = _fleet('policy.name="predicted_ttft"').policy
    p = policy.params
    assert (p.hardware, p.model, p.max_num_batched_tokens) == ("h100", "llama-3.1-8b", 4096)
    assert policy._cost == fitted_cost("h100", "llama-3.1-8b")  # not the H20 / Qwen fit
    assert fitted_cost("h100", "llama-3.1-8b") != fitted_cost("h20", "qwen3-coder-30b-a3b")


def test_a_parameter_the_config_sets_is_kept() -> None:
    p = _fleet('policy.name="predicted_ttft"', 'policy.params.hardware="h20"').policy.params
    assert (p.hardware, p.model, p.max_num_batched_tokens) == ("h20", "llama-3.1-8b", 4096)


def test_only_parameters_the_policy_declares_are_added() -> None:
    fleet = {"hardware": "h100", "model": "llama-3.1-8b", "max_num_batched_tokens": 4096}
    assert with_fleet_defaults("dynamo_kv", {}, fleet) == {}
    assert with_fleet_defaults("predicted_ttft", {"model": "m"}, fleet) == {
        "hardware": "h100",
        "model": "m",
        "max_num_batched_tokens": 4096,
    }
    assert with_fleet_defaults("no_such_policy", {"a": 1}, fleet) == {"a": 1}
