# Parse-time plan: expand config["experiments"] into runs, each resolved and keyed by run_id.

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

# Runs this pipeline produces, and archived runs (read, never rerun) it reads instead.
RUN_IDS = PLAN.to_run()
ARCHIVED_IDS = [r for r in PLAN.run_ids() if r not in set(RUN_IDS)]


def run_outputs(name):
    return [f"{RESULTS}/runs/{run_id}/{name}" for run_id in RUN_IDS]


def archived_records():
    return [f"{ARCHIVE}/{run_id}/requests.jsonl" for run_id in ARCHIVED_IDS]


def override_flags(wildcards):
    return " ".join(f"--set {shlex.quote(o)}" for o in PLAN.first(wildcards.run_id).overrides)


def run_resource(name, default):
    return lambda wildcards: PLAN.first(wildcards.run_id).resources.get(name, default)


# The simulator's measured profile data are not part of a run's config, so run_id does not
# change when they are remeasured. As inputs of simulated runs, a remeasurement reruns the runs
# that use it (by mtime): a calibrated profile `<hardware>.json` (e.g. cpu-tiny.json, written by
# `akvc calibrate`) for its hardware, else the measured operator tables (*.csv) GPU profiles are
# composed or derived from. Real runs do not depend on them.
SIM_PROFILE_DIR = Path("src/agentic_kvc/sim/profiles/data")


def sim_profile_inputs(wildcards):
    run = PLAN.first(wildcards.run_id)
    if run.backend != "sim":
        return []
    calibrated = SIM_PROFILE_DIR / f"{run.hardware}.json"
    if Path(workflow.basedir, calibrated).is_file():
        return [str(calibrated)]
    tables = Path(workflow.basedir, SIM_PROFILE_DIR).glob("*.csv")
    return sorted(str(SIM_PROFILE_DIR / p.name) for p in tables)
