"""The host's other processes in the simulator (`sim.host_neighbour_threads`): a profile's
background terms slow every step and delay each request on its way to the engine."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from fixed_profile import PROFILE

from agentic_kvc.config import load_config
from agentic_kvc.profiles.linear import LinearStepCost
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload.model import Block, Request, Session, Workload

# 1 ms per prompt token, nothing else: times by hand.
COST = LinearStepCost(0.0, 1e-3, 0.0, 0.0, 0.0, 0.0)


def _times(background: float, slowdown: float = 0.0, delay_s: float = 0.0) -> dict[str, float]:
    """Two 1,000-token prompts (one output token each) at t=0 and t=0.5 on one instance:
    each one's first token."""
    config = load_config(
        {
            "backend": "sim",
            "workload": {"mode": "open", "generator": {"sessions": 1}},  # replaced below
            "fleet": {"instances": 1, "max_num_batched_tokens": 1000},
            "sim": {"host_neighbour_threads": background},
        }
    )
    workload = Workload(
        [
            Session("x", [Request("x0", "x", 0, 1000, 1, (Block(1, 1000),))]),
            Session("y", [Request("y0", "y", 0, 1000, 1, (Block(2, 1000),), arrival_s=0.5)]),
        ]
    )
    profile = replace(
        PROFILE,
        cost=COST,
        kv_capacity_tokens=65536,
        background_slowdown=slowdown,
        background_delay_s=delay_s,
    )
    fleet = SimFleet(config, workload, profile)
    fleet.run()
    return {r.request_id: r.t_first_token for r in fleet.records}


def test_an_idle_host_or_a_profile_without_terms_changes_nothing() -> None:
    plain = _times(0.0)
    assert plain == pytest.approx({"x0": 1.0, "y0": 2.0})  # y waits for x's step
    assert _times(0.0, slowdown=0.5, delay_s=0.1) == plain
    assert _times(2.0) == plain


def test_the_slowdown_stretches_every_step() -> None:
    # 1 + 0.25 * 2 cores: 1.5 s per prompt; y (at 0.5) waits until 1.5.
    assert _times(2.0, slowdown=0.25) == pytest.approx({"x0": 1.5, "y0": 3.0})


def test_the_delay_holds_each_request_before_its_engine() -> None:
    # Each request's wait is an exponential draw of mean 0.1 s per thread (2 threads: 0.2 s),
    # from the run's own stream, in release order.
    rng = random.Random("ingress-0")
    wait_x, wait_y = rng.expovariate(1 / 0.2), rng.expovariate(1 / 0.2)
    x_first = wait_x + 1.0  # a 1 s prompt
    y_first = max(0.5 + wait_y, x_first) + 1.0  # after its wait, and after x's step
    t = _times(2.0, delay_s=0.1)
    assert t == pytest.approx({"x0": x_first, "y0": y_first})
    assert t == _times(2.0, delay_s=0.1)  # deterministic for a seed


def test_waits_average_the_fitted_delay_per_thread() -> None:
    """Far-apart 10-token requests (10 ms each): TTFT is the wait plus 10 ms, and the waits
    average 0.1 s per neighbour thread."""
    config = load_config(
        {
            "backend": "sim",
            "workload": {"mode": "open", "generator": {"sessions": 1}},  # replaced below
            "fleet": {"instances": 1},
            "sim": {"host_neighbour_threads": 1.5},
        }
    )
    workload = Workload(
        [
            Session(
                f"s{i}", [Request(f"r{i}", f"s{i}", 0, 10, 1, (Block(i, 10),), arrival_s=10.0 * i)]
            )
            for i in range(2000)
        ]
    )
    profile = replace(PROFILE, cost=COST, kv_capacity_tokens=65536, background_delay_s=0.1)
    fleet = SimFleet(config, workload, profile)
    fleet.run()
    waits = [r.ttft_s - 0.010 for r in fleet.records]
    assert min(waits) >= 0.0
    assert sum(waits) / len(waits) == pytest.approx(0.15, rel=0.06)
    assert len({round(w, 9) for w in waits}) == len(waits)  # drawn, not one fixed delay
