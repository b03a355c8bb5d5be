"""Prefill runs (engine.py: a long prompt's full-budget chunks planned as one step) change
nothing a run writes: records and instance samples equal, field for field, to the fleet that
plans every chunk on its own, also where KV runs short (evictions, preemptions) and scrapes
land inside runs."""

from __future__ import annotations

from typing import Any

import pytest
from fixed_profile import PROFILE

from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload


class StepByStep(SimFleet):
    probes_pools = True  # (what turns prefill runs off)


def cfg(**sets: Any) -> RunConfig:
    base: dict[str, Any] = {
        "backend": "sim",
        "seed": 5,
        "workload": {
            "generator": {
                "preset": "agentic-coding",
                "sessions": 10,
                "params": {"first_turn_median_tokens": 12_000, "session_rate_per_s": 2.0},
            }
        },
        "fleet": {"instances": 2, "max_num_batched_tokens": 1024},
        "sim": {"scrape_interval_s": 0.05, "sample_interval_s": 0.05},
    }
    return load_config(base, [f"{k}={v}" for k, v in sets.items()])


def _run(cls: type[SimFleet], config: RunConfig) -> tuple[list[dict], list[dict], int, int]:
    fleet = cls(config, load_workload(config.workload, config.seed), PROFILE)
    stats = fleet.run()
    records = sorted((r.to_dict() for r in fleet.records), key=lambda r: r["request_id"])
    samples = [s.to_dict() for s in fleet.samples]
    return records, samples, stats.steps, sum(i.preemptions for i in fleet.instances)


@pytest.mark.parametrize(
    "sets",
    [
        {"fleet.kv_cache_tokens": 400_000},
        # ~2 prompts' worth of KV per instance: evictions and preemptions inside runs' reach.
        {"fleet.kv_cache_tokens": 30_000, "policy.name": "lmetric"},
        {"fleet.kv_cache_tokens": 60_000, "policy.name": "unified", "fleet.max_num_seqs": 3},
    ],
)
def test_prefill_runs_write_the_same_records_and_samples(sets: dict[str, Any]) -> None:
    config = cfg(**sets)
    fast = _run(SimFleet, config)
    slow = _run(StepByStep, config)
    assert fast[0] and fast[0] == slow[0]
    assert fast[1] and fast[1] == slow[1]
    assert fast[3] == slow[3]
    assert fast[2] < slow[2]  # runs did happen: fewer planned steps


def test_exact_view_plans_every_chunk() -> None:
    """Routing on the exact view reads the pools between steps: no prefill runs then."""
    config = cfg(**{"fleet.kv_cache_tokens": 400_000, "policy.cache_view": "exact"})
    fleet = SimFleet(config, load_workload(config.workload, config.seed), PROFILE)
    assert not any(inst.prefill_runs for inst in fleet.instances)
