# Parse-time plan: expand config["experiments"] into runs, each resolved and keyed by run_id.

import json
import shlex

from agentic_kvc.analysis.experiments import expand as expand_experiments
from agentic_kvc.config import ConfigError
from agentic_kvc.runs import is_complete

RESULTS = config["results"]
ARCHIVE = config["archive"]
PLAN_FILE = f"{RESULTS}/work/plan.json"

try:
    PLAN = expand_experiments(
        config["experiments"],
        root=Path(workflow.basedir),
        archive=Path(ARCHIVE),
        tags=config["select_tags"],
    )
except ConfigError as exc:
    raise WorkflowError(f"config/config.yaml experiments: {exc}") from None

def checkout_files(paths):
    """Those of `paths` that exist: a workflow run against an installed package has no src/."""
    return sorted(p for p in paths if Path(p).is_file())


# The code that turns records into the report's sections and tables: an input of the notebooks
# and of the report, so that an edit to an analysis module runs them again (Snakemake's code
# trigger sees a rule's own code only; a study's text changed and its section did not).
ANALYSIS_CODE = checkout_files(
    [*(str(p) for p in Path("src/agentic_kvc/analysis").rglob("*.py")), "src/agentic_kvc/paired.py"]
)

# Runs this pipeline produces, and archived runs (read, never rerun) it reads instead.
RUN_IDS = PLAN.to_run()
ARCHIVED_IDS = [r for r in PLAN.run_ids() if r not in set(RUN_IDS)]


def run_outputs(name):
    return [f"{RESULTS}/runs/{run_id}/{name}" for run_id in RUN_IDS]


def archived_records():
    return [f"{ARCHIVE}/{run_id}/requests.jsonl" for run_id in ARCHIVED_IDS]


def runs_read_by(notebook, name):
    """The run files a notebook reads: none for a section of `sections:` (it reads only its
    own data, `notebook_inputs`), so that its claim (`claim_<id>`) makes no experiment run."""
    if notebook.removeprefix("study_") in config.get("sections", []):
        return []
    extra = archived_records() if name == "requests.jsonl" else []
    return run_outputs(name) + extra


# Simulated runs are made in batches (one process each); the repeated real runs of an
# experiment too (one fleet for the batch); other real runs one job each.
SIM_BATCHES = PLAN.sim_batches(config["sim_batch"])
REAL_BATCHES = PLAN.real_batches()
UNBATCHED_IDS = sorted(
    set(RUN_IDS)
    - {r.run_id for b in [*SIM_BATCHES.values(), *REAL_BATCHES.values()] for r in b}
)


def batch_spec(run):
    """`akvc run-batch`'s SPEC for one planned run: [base, override, ...] as JSON."""
    return json.dumps([run.base, *run.overrides])


def override_flags(wildcards):
    return " ".join(f"--set {shlex.quote(o)}" for o in PLAN.first(wildcards.run_id).overrides)


# Snakemake starts ready jobs by priority, and otherwise in no set order. Runs start by repeat
# index (matrix key `repeat`), then in plan order: with --cores 1 the repeats of a real-engine
# experiment interleave (r0 of every variant, then r1, ...), so a slow spell of the machine
# falls on all variants alike rather than on one.
_ORDER = sorted(
    range(len(RUN_IDS)),
    key=lambda i: (PLAN.first(RUN_IDS[i]).labels.get("repeat", 0), i),
)
_PLAN_RANK = {RUN_IDS[i]: len(RUN_IDS) - k for k, i in enumerate(_ORDER)}


def run_priority(wildcards):
    return _PLAN_RANK.get(wildcards.run_id, 0)


def batch_priority(runs):
    return max(_PLAN_RANK.get(r.run_id, 0) for r in runs)


def run_resource(name, default):
    return lambda wildcards: PLAN.first(wildcards.run_id).resources.get(name, default)


# Real CPU engines time themselves against the machine's cores: two fleets side by side would
# measure each other, and so would a simulated batch or a notebook beside one. Every job that
# starts real engines (or times itself: a benchmark) takes the whole `machine`; every other job
# takes one unit of it (the default profile's default-resources), so with `--cores 2` simulated
# jobs and notebooks run two at a time, and a real-engine job runs alone.
WHOLE_MACHINE = 1000  # the default profile's `machine` total

# Without a profile nothing limits `machine`: `snakemake --cores 2 report` would start a real
# fleet beside a simulated batch. One job at a time (--cores 1) is safe; more needs a profile
# that says how much `machine` there is (default: this machine's; slurm: every node its own).
_res = workflow.resource_settings
if (
    workflow.is_main_process
    and "machine" not in workflow.global_resources
    and max(_res.cores or 1, _res.nodes or 1) > 1
):
    raise WorkflowError(
        "more than one job at a time without the `machine` resource: real-engine jobs could "
        "run beside others and time each other. Use `make report`, add --workflow-profile "
        "workflow/profiles/default (or --profile workflow/profiles/slurm), run with --cores 1, "
        "or give --resources machine=1000 yourself."
    )


def machine_share(wildcards):
    return 1 if PLAN.first(wildcards.run_id).backend == "sim" else WHOLE_MACHINE


# The simulator's measured profile data are not part of a run's config, so run_id does not
# change when they are remeasured. As inputs of simulated runs, a remeasurement reruns the runs
# that use it (by mtime): a calibrated profile `<hardware>.json` (e.g. cpu-tiny.json, written by
# `akvc calibrate`) for its hardware, else the measured operator tables (*.csv) GPU profiles are
# composed or derived from. Real runs do not depend on them.
SIM_PROFILE_DIR = Path("src/agentic_kvc/profiles/data")


def trace_files(run):
    """A run replaying a public trace under results/traces/ needs it fetched first."""
    return [run.trace] if run.trace.startswith(f"{RESULTS}/traces/") else []


def trace_inputs(wildcards):
    return trace_files(PLAN.first(wildcards.run_id))


def sim_profile_inputs(wildcards):
    return sim_profile_files(PLAN.first(wildcards.run_id))


def sim_profile_files(run):
    if run.backend != "sim":
        return []
    calibrated = SIM_PROFILE_DIR / f"{run.hardware}.json"
    if Path(workflow.basedir, calibrated).is_file():
        return [str(calibrated)]
    tables = Path(workflow.basedir, SIM_PROFILE_DIR).glob("*.csv")
    return sorted(str(SIM_PROFILE_DIR / p.name) for p in tables)

