"""A large sweep on a cluster: the slurm profile submits one job per run, or one per batch.

A dry run through the shipped profile (`workflow/profiles/slurm`, Snakemake's slurm executor
plugin) needs no cluster: it plans the jobs it would submit. Fifteen simulated runs become
fifteen `akvc_run` jobs, or three with `--groups akvc_run=sims --group-components sims=5`.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from test_snakemake_pipeline import snakemake

SWEEP = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": [],
    "experiments": [
        {
            "name": "sweep",
            "base": "config/runs/sim_h20_agentic.yaml",
            "matrix": {
                "policy.name": ["round_robin", "unified", "lmetric"],
                "seed": [0, 1, 2, 3, 4],
            },
        }
    ],
    "bench": {"scripts": {}},
}


def _dry_run(pipeline: Path, *extra: str) -> str:
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(SWEEP))
    out = snakemake(pipeline, "--profile", "workflow/profiles/slurm", "-n", "report", *extra)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout + out.stderr


def test_slurm_profile_plans_one_job_per_run(pipeline: Path) -> None:
    log = _dry_run(pipeline)
    assert re.search(r"^akvc_run\s+15$", log, re.M)
    assert "Group job" not in log


def test_slurm_profile_batches_runs_with_groups(pipeline: Path) -> None:
    log = _dry_run(pipeline, "--groups", "akvc_run=sims", "--group-components", "sims=5")
    assert re.search(r"^akvc_run\s+15$", log, re.M)
    assert log.count("Group job sims") == 3
