"""agentic_kvc pipeline: experiment runs -> papermill notebooks -> REPORT.md.

    snakemake --cores 1 report                      # the default experiment set (config/config.yaml)
    snakemake --cores 1 report --configfile config/smoke.yaml
    snakemake --profile workflow/profiles/slurm report

Every run is keyed by the run_id of its resolved config, computed here at parse time, so the
outputs are results/runs/<run_id>/... and an unchanged config never runs twice.
"""

import os
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.json")


def _no_repeated_keys(paths):
    """Snakemake's YAML reader keeps the last of two equal keys silently; refuse them instead."""
    import yaml

    from agentic_kvc.config import load_yaml

    for path in paths:
        try:
            load_yaml(Path(path).read_text())
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: {exc}") from None


_no_repeated_keys(workflow.configfiles)

# Tools of this environment (akvc, jupytext, papermill) are found even when snakemake is called
# as .venv/bin/snakemake without activating the venv; cluster jobs re-parse this file too.
os.environ.update(PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


include: "workflow/rules/common.smk"


if Path(workflow.basedir, "workflow/rules/workloads.smk").exists():

    include: "workflow/rules/workloads.smk"


include: "workflow/rules/runs.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/instruments.smk"
include: "workflow/rules/lifecycle.smk"
include: "workflow/rules/epd.smk"
include: "workflow/rules/sweeps.smk"
