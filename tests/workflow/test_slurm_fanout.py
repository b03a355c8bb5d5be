"""A large sweep on a cluster: the slurm profile submits one job per batch of runs.

A dry run through the shipped profile (`workflow/profiles/slurm`, Snakemake's slurm executor
plugin) needs no cluster: it plans the jobs it would submit. Fifteen simulated runs become two
batch jobs by default (12 runs per job), fifteen with `--config sim_batch=1`, three with
`sim_batch=5`.
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


def _batch_jobs(log: str) -> list[str]:
    """The batch jobs in the dry run's job stats (printed once or twice), one each."""
    return sorted(set(re.findall(r"^(sim_batch_sweep_\d+)\s+1$", log, re.M)))


def test_slurm_profile_plans_one_job_per_batch(pipeline: Path) -> None:
    log = _dry_run(pipeline)
    assert _batch_jobs(log) == ["sim_batch_sweep_0", "sim_batch_sweep_1"]  # 12 runs, then 3


def test_slurm_profile_one_job_per_run_or_per_batch_of_five(pipeline: Path) -> None:
    assert len(_batch_jobs(_dry_run(pipeline, "--config", "sim_batch=1"))) == 15
    assert len(_batch_jobs(_dry_run(pipeline, "--config", "sim_batch=5"))) == 3
