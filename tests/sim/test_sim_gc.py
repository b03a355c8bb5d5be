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
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import profile_for
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


# In a fresh process: in the test session, other tests' leftovers (an HTTP client's
# connections in a background thread) can turn into cyclic garbage during the run and be
# counted as the run's.
CHILD = """
import gc, json, sys
from agentic_kvc.config import load_config
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload

config = load_config(sys.argv[1], json.loads(sys.argv[2]))
fleet = SimFleet(config, load_workload(config.workload, config.seed), profile_for(config))
assert gc.isenabled()
gc.collect()
# Off before the run, so that nothing collects between its end and the count below (the
# collector, re-enabled, would collect at the next allocation).
gc.disable()
fleet.run()
restored = not gc.isenabled()  # the run restores the state it found
gc.set_debug(gc.DEBUG_SAVEALL)
found = gc.collect()
kinds = sorted({type(o).__name__ for o in gc.garbage})
print(json.dumps({"found": found, "kinds": kinds[:8], "restored": restored,
                  "records": len(fleet.records)}))
"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_leaves_no_cyclic_garbage(name: str) -> None:
    args = [str(RUNS / "sim_agentic.yaml"), json.dumps([*SMALL, *CASES[name]])]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["restored"] and got["records"] > 0
    assert got["found"] == 0, (
        f"{name}: the run left {got['found']} objects in cycles ({got['kinds']})"
    )


def test_the_run_restores_an_enabled_collector() -> None:
    config = load_config(RUNS / "sim_agentic.yaml", ["workload.generator.sessions=2"])
    fleet = SimFleet(config, load_workload(config.workload, config.seed), profile_for(config))
    assert gc.isenabled()
    fleet.run()
    assert gc.isenabled()


# In a fresh process: the young generation's count and the frozen objects are the process's.
SURVIVORS = """
import gc, json, sys
from agentic_kvc.config import load_config
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload

config = load_config(sys.argv[1], ["workload.generator.sessions=20"])
out = {}
for frozen in (False, True):
    fleet = SimFleet(config, load_workload(config.workload, config.seed), profile_for(config))
    gc.collect()
    if frozen:
        gc.freeze()
    before = gc.get_freeze_count()
    young = []
    gc.callbacks.append(lambda phase, info: young.append(info["generation"]))
    fleet.run()
    fleet.records.append(object())  # an allocation, which would start a pending collection
    out[str(frozen)] = {"count": gc.get_count()[0], "before": before,
                        "after": gc.get_freeze_count(), "collections": len(young),
                        "enabled": gc.isenabled()}
    gc.callbacks.clear()
print(json.dumps(out))
"""


def test_the_run_hands_its_survivors_to_the_oldest_generation_without_a_pass() -> None:
    """Re-enabled, the collector does not start with a pass over everything the run made (it
    would find nothing), and a caller's frozen objects stay frozen."""
    out = subprocess.run(
        [sys.executable, "-c", SURVIVORS, str(RUNS / "sim_agentic.yaml")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    plain, frozen = got["False"], got["True"]
    assert plain["enabled"] and frozen["enabled"]
    assert plain["collections"] == 0 and plain["count"] < 100 and plain["after"] == 0
    # With objects frozen by the caller the run leaves them so (no freeze/unfreeze of its
    # own, which would unfreeze them all; a few may have died meanwhile).
    assert frozen["before"] > 1000 and frozen["after"] > frozen["before"] // 2


# In a fresh process, as above. `akvc run-batch` frees each simulated fleet it ran: a fleet
# holds reference cycles, so without a collection each run's stores would stay in the process
# until a rare full collection.
RUN_BATCH = """
import gc, json, sys, tempfile
from click.testing import CliRunner
from agentic_kvc.cli import main
from agentic_kvc.config import load_config
from agentic_kvc.sim.run_backend import run_sim

spec = json.dumps([sys.argv[1], *json.loads(sys.argv[2])])
results = tempfile.mkdtemp()
gc.collect()
gc.disable()  # nothing collects but what the code under test asks for
res = CliRunner().invoke(main, ["run-batch", spec, "--results", results])
assert res.exit_code == 0, res.output
after_batch = gc.collect()
run_sim(load_config(sys.argv[1], json.loads(sys.argv[2])), tempfile.mkdtemp())
after_run_sim = gc.collect()
print(json.dumps({"after_batch": after_batch, "after_run_sim": after_run_sim}))
"""


def test_run_batch_frees_each_simulated_fleet() -> None:
    sets = [*SMALL, "policy.name=dynamo_kv", "fleet.kv_tiers.host_gib=1"]
    out = subprocess.run(
        [sys.executable, "-c", RUN_BATCH, str(RUNS / "sim_agentic.yaml"), json.dumps(sets)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["after_batch"] < 50  # the CLI's own leftovers at most, no fleet
    # Control: a fleet run without the batch's collection leaves its cycles.
    assert got["after_run_sim"] > 100
