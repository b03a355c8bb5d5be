# The sweeps' plan at parse time (workflow/rules/sweeps.smk): scenario names, seeds and
# policies come from the benchmark scripts themselves, the GPU grid's C from lifecycle/grids.py.

import importlib.util as _ilu
import sys as _sys


def _benchmark(name):
    """benchmarks/<name>.py as a module (parse time: scenario names, seeds, policies)."""
    if name not in _sys.modules:
        spec = _ilu.spec_from_file_location(name, Path(workflow.basedir, "benchmarks", f"{name}.py"))
        mod = _ilu.module_from_spec(spec)
        _sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return _sys.modules[name]


_RB = _benchmark("policy_robustness")
SWEEP_WORK = f"{RESULTS}/robustness"
SWEEP_SCRIPTS = {"robustness": "benchmarks/policy_robustness.py", "misspec": "benchmarks/policy_misspec.py"}
# Seeds per scenario: the scripts' defaults (robustness 5, misspec 3; one for a trace without
# windows), so a target's JSON is the one the script writes when run by hand.
SWEEP_SEEDS = {"robustness": len(_RB.SEEDS), "misspec": 3}
MISSPEC_DEFAULT = "chat,heavy_tail,short_ctx,high_reuse,long_fleet16,h100_qwen".split(",")


def sweep_seeds(sweep, scenario):
    return list(range(_RB.REPLICATES.get(scenario, SWEEP_SEEDS[sweep])))


def sweep_traces(wildcards):
    """A scenario replaying a public trace (../shared/traces) needs the file: missing, the DAG
    says which."""
    sets = _RB.SCENARIOS[wildcards.scenario][2]
    return [s.split("=", 1)[1] for s in sets if s.startswith("workload.trace=")]


def sweep_markers(sweep, scenarios):
    return [
        f"{RESULTS}/sweeps/{sweep}/{sc}/seed{s}.json"
        for sc in scenarios
        for s in sweep_seeds(sweep, sc)
    ]


def misspec_after_robustness(wildcards):
    if wildcards.sweep != "misspec":
        return []
    return [f"{RESULTS}/sweeps/robustness/{wildcards.scenario}/seed{wildcards.seed}.json"]


from agentic_kvc.lifecycle.grids import GRIDS as _LIFECYCLE_GRIDS

LIFECYCLE_GPU_CS = _LIFECYCLE_GRIDS["gpu"].cs
