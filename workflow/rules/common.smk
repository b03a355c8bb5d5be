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
