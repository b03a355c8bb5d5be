# The sweeps' plan (workflow/rules/sweeps.smk): scenario names, seeds and policies come from the
# benchmark scripts themselves, the GPU grid's C from lifecycle/grids.py. The scripts are
# imported only when a sweep target is in the DAG (input functions), not at every parse: a
# parse is most of a cluster job's overhead, and a broken benchmark must not stop `report`.

from agentic_kvc.bench_scripts import load_benchmark as _load_benchmark
from agentic_kvc.lifecycle.grids import GRIDS as _LIFECYCLE_GRIDS

SWEEP_WORK = f"{RESULTS}/robustness"
SWEEP_SCRIPTS = {"robustness": "benchmarks/policy_robustness.py", "misspec": "benchmarks/policy_misspec.py"}
# The misspec script's default workloads and seeds (its --scenarios and --seeds defaults).
MISSPEC_DEFAULT = "chat,heavy_tail,short_ctx,high_reuse,long_fleet16,h100_qwen".split(",")
MISSPEC_SEEDS = 3
LIFECYCLE_GPU_CS = _LIFECYCLE_GRIDS["gpu"].cs


def _robustness():
    """benchmarks/policy_robustness.py as a module (its scenarios, seeds and replicates)."""
    return _load_benchmark("policy_robustness", Path(workflow.basedir, "benchmarks"))


def _scenario(name):
    rb = _robustness()
    if name not in rb.SCENARIOS:
        raise WorkflowError(
            f"sweep scenario {name!r} is not in benchmarks/policy_robustness.py SCENARIOS: "
            + ", ".join(rb.SCENARIOS)
        )
    return rb.SCENARIOS[name]


def sweep_seeds(sweep, scenario):
    """The scripts' default seeds (robustness 5, misspec 3; one for a trace without windows),
    so a target's JSON is the one the script writes when run by hand."""
    rb = _robustness()
    default = len(rb.SEEDS) if sweep == "robustness" else MISSPEC_SEEDS
    return list(range(rb.REPLICATES.get(scenario, default)))


def sweep_traces(wildcards):
    """A scenario replaying a public trace (../shared/traces) needs the file: missing, the DAG
    says which."""
    sets = _scenario(wildcards.scenario)[2]
    return [s.split("=", 1)[1] for s in sets if s.startswith("workload.trace=")]


def sweep_markers(sweep, scenarios):
    return [
        f"{RESULTS}/sweeps/{sweep}/{sc}/seed{s}.json"
        for sc in scenarios
        for s in sweep_seeds(sweep, sc)
    ]


def scenario_markers(wildcards):
    _scenario(wildcards.scenario)
    return sweep_markers(wildcards.sweep, [wildcards.scenario])


def robustness_markers(wildcards):
    return sweep_markers("robustness", list(_robustness().SCENARIOS))


def misspec_markers(wildcards):
    return sweep_markers("misspec", MISSPEC_DEFAULT)


def misspec_after_robustness(wildcards):
    if wildcards.sweep != "misspec":
        return []
    return [f"{RESULTS}/sweeps/robustness/{wildcards.scenario}/seed{wildcards.seed}.json"]
