"""Instances sharing a CPU host's cores (a profile with `contended_cost`): a step runs at the
contended rate only while another instance is mid-step, and at the base rate otherwise."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixed_profile import PROFILE

from agentic_kvc.config import load_config
from agentic_kvc.profiles.cost import AffineStepCost
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload
from agentic_kvc.workload.model import Block, Request, Session, Workload

# 1 ms per prompt token alone, 2 ms while the other instance is mid-step: times by hand.
BASE = AffineStepCost(per_token_s=1e-3)
SHARED = replace(
    PROFILE, cost=BASE, contended_cost=AffineStepCost(per_token_s=2e-3), kv_capacity_tokens=65536
)


def _two_prompts(second_arrival_s: float) -> dict[str, tuple[float, float]]:
    """A 1,000-token prompt at t=0 and another at `second_arrival_s`, one output token each,
    on two instances: (first token, done) per request."""
    config = load_config(
        {
            "backend": "sim",
            "workload": {"mode": "open", "generator": {"sessions": 1}},  # replaced below
            "fleet": {"instances": 2, "max_num_batched_tokens": 2048},
            "policy": {"name": "round_robin"},
        }
    )
    workload = Workload(
        [
            Session("x", [Request("x0", "x", 0, 1000, 1, (Block(1, 1000),))]),
            Session(
                "y", [Request("y0", "y", 0, 1000, 1, (Block(2, 1000),), arrival_s=second_arrival_s)]
            ),
        ]
    )
    fleet = SimFleet(config, workload, SHARED)
    fleet.run()
    assert {r.prefill_instance for r in fleet.records} == {0, 1}
    return {r.request_id: (r.t_first_token, r.t_done) for r in fleet.records}


def test_the_slowdown_lasts_only_while_the_steps_overlap() -> None:
    t = _two_prompts(0.5)
    # x: 500 tokens alone (0.5 s), the other 500 at half rate beside y (1.0 s): ends at 1.5.
    assert t["x0"][0] == pytest.approx(1.5)
    # y: 500 tokens at half rate beside x (0.5..1.5), 500 alone (0.5 s): ends at 2.0.
    assert t["y0"][0] == pytest.approx(2.0)
    # (a slowdown fixed when a step starts would give x 1.0 and y 2.5)


def test_steps_that_do_not_overlap_run_at_the_base_rate() -> None:
    t = _two_prompts(5.0)
    assert t["x0"][0] == pytest.approx(1.0)
    assert t["y0"][0] == pytest.approx(6.0)


@pytest.mark.parametrize("policy", ["round_robin", "lmetric"])
def test_closed_form_decode_runs_match_step_by_step_under_contention(policy: str) -> None:
    """A decode run that another instance's step starts or ends in the middle of is cut there
    and re-planned at the new rate: the same times as planning every step on its own."""
    profile = replace(PROFILE, contended_cost=replace(PROFILE.cost, per_token_s=5e-6))
    config = load_config(
        {
            "backend": "sim",
            "seed": 5,
            "workload": {"generator": {"preset": "agentic-coding", "sessions": 8}},
            "fleet": {"instances": 2, "kv_cache_tokens": 400_000},
            "policy": {"name": policy},
        }
    )
    workload = load_workload(config.workload, config.seed)
    runs = []
    for closed_form in (True, False):
        fleet = SimFleet(config, workload, profile, closed_form=closed_form)
        fleet.run()
        runs.append(sorted(fleet.records, key=lambda r: r.request_id))
    fast, slow = runs
    assert len(fast) == len(slow) > 0
    for a, b in zip(fast, slow, strict=True):
        assert a.prefill_instance == b.prefill_instance
        assert a.t_first_token == pytest.approx(b.t_first_token, abs=1e-6)
        assert a.t_done == pytest.approx(b.t_done, abs=1e-6)
