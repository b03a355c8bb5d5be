"""Closed-form check of the simulator's queueing: one instance, no batching, M/D/1.

Fixed-size requests (one prefill step, one output token) arrive as a Poisson process at one
instance with `max_num_seqs` 1 and a step cost that is a constant S. That is an M/D/1 queue,
whose mean wait is the Pollaczek-Khinchine value Wq = rho * S / (2 * (1 - rho)). The simulated
wait of a request is its TTFT minus S.
"""

from __future__ import annotations

import numpy as np

from agentic_kvc.config import RunConfig
from agentic_kvc.profiles.cost import AffineStepCost, EngineProfile
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload.model import Block, Request, Session, Workload

PROMPT_TOKENS = 64


def mdl_wq(load: float, service_s: float) -> float:
    return load * service_s / (2 * (1 - load))


def poisson_workload(n: int, rate: float, seed: int) -> Workload:
    """n single-turn sessions, each one request of fixed size, Poisson arrivals."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    sessions = []
    for i in range(n):
        sid = f"s{i:07d}"
        blocks = (Block(i + 1, PROMPT_TOKENS),)  # distinct content: no prefix hits
        req = Request(f"{sid}-t0", sid, 0, PROMPT_TOKENS, 1, blocks, arrival_s=float(t[i]))
        sessions.append(Session(sid, [req]))
    return Workload(sessions, {"source": "poisson", "rate": rate, "seed": seed})


def mdl_check(
    load: float, n_requests: int, seed: int = 0, service_s: float = 0.1, warmup: float = 0.01
) -> dict[str, float | int]:
    """Simulated vs M/D/1 mean queueing delay at utilisation `load`."""
    if not 0 < load < 1:
        raise ValueError(f"load must be in (0, 1), got {load}")
    profile = EngineProfile(
        "mdl", "fixed", AffineStepCost(overhead_s=service_s), 1, 1 << 20, "M/D/1 check"
    )
    config = RunConfig.model_validate(
        {
            "seed": seed,
            "workload": {"generator": {"sessions": 1}, "mode": "open"},
            "fleet": {"instances": 1, "max_num_seqs": 1},
            "policy": {"name": "round_robin"},
            "sim": {"scrape_interval_s": 0, "sample_interval_s": 1e9},
        }
    )
    workload = poisson_workload(n_requests, load / service_s, seed)
    fleet = SimFleet(config, workload, profile)
    stats = fleet.run()
    recs = sorted(fleet.records, key=lambda r: r.arrival_s)[int(warmup * n_requests) :]
    waits = np.array([r.ttft_s - service_s for r in recs if r.ttft_s is not None])
    expected = mdl_wq(load, service_s)
    sim = float(waits.mean())
    return {
        "load": load,
        "requests": n_requests,
        "measured": len(waits),
        "seed": seed,
        "service_s": service_s,
        "wq_mdl_s": expected,
        "wq_sim_s": sim,
        "rel_error": sim / expected - 1,
        "utilisation": float(len(recs) * service_s / (recs[-1].t_done - recs[0].arrival_s)),
        "sim_events": stats.events,
    }
