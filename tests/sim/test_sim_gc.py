"""A simulated run makes no reference cycles, so it may run with the cyclic collector off.

`SimFleet.run` disables the collector for its duration (`no_cycle_collection`: its passes
over millions of live objects found nothing and cost a fifth of a large run). That is only
safe while a run leaves no cyclic garbage: a cycle reintroduced (as a request's flight and its
sequences once were) would hold its objects, hash lists included, until the run ends. These
runs cover the colocated and PD paths, preemption under KV pressure, the exact view, an
open loop and agentic DAGs.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.sim.backend import profile_for
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload

RUNS = Path(__file__).resolve().parents[2] / "config" / "runs"
SMALL = ["workload.generator.sessions=30"]
CASES = {
    "unified": ["policy.name=unified"],
    "static_pd": ["policy.name=static_pd"],
    "conditional_disagg": ["policy.name=conditional_disagg"],
    "pressure": [
        "policy.name=adaptive",
        "fleet.instances=2",
        "fleet.kv_cache_tokens=12288",
        "workload.generator.params.session_rate_per_s=20",
    ],
    "exact_open": ["policy.name=lmetric", "policy.cache_view=exact", "workload.mode=open"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_leaves_no_cyclic_garbage(name: str) -> None:
    config = load_config(RUNS / "sim_agentic.yaml", [*SMALL, *CASES[name]])
    fleet = SimFleet(config, load_workload(config.workload, config.seed), profile_for(config))
    assert gc.isenabled()
    gc.collect()
    # Off before the run, so that nothing collects between its end and the count below (the
    # collector, re-enabled, would collect at the next allocation).
    gc.disable()
    try:
        fleet.run()
        assert not gc.isenabled()  # the run restores the state it found
        gc.set_debug(gc.DEBUG_SAVEALL)
        found = gc.collect()
        kinds = sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert len(fleet.records) > 0
    assert found == 0, f"{name}: the run left {found} objects in cycles ({kinds[:8]})"


def test_the_run_restores_an_enabled_collector() -> None:
    config = load_config(RUNS / "sim_agentic.yaml", ["workload.generator.sessions=2"])
    fleet = SimFleet(config, load_workload(config.workload, config.seed), profile_for(config))
    assert gc.isenabled()
    fleet.run()
    assert gc.isenabled()
