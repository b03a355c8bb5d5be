"""The pipeline on a real SLURM: a small report target and a sweep target through the slurm
profile, against the same targets run locally.

`workflow/slurm/local_cluster.sh up` installs Debian's slurm-wlm, slurmdbd, MariaDB and munge
when missing and starts a single-node cluster on loopback (docs/cluster.md); the pipeline then
submits every non-local job with `sbatch` through Snakemake's slurm executor plugin, which
polls `sacct` (slurmdbd) for their states. Simulated runs are deterministic, so the records
must equal those of `--cores 1`. Root only (it installs packages and starts system daemons);
elsewhere it skips and says so. Slow: ~2-3 min with the packages present on a busy 2-core
machine, plus ~1-2 min of apt-get on a fresh machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from agentic_kvc.bench_scripts import load_benchmark

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "workflow" / "slurm" / "local_cluster.sh"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        sys.platform != "linux" or os.geteuid() != 0,
        reason="needs root: workflow/slurm/local_cluster.sh installs Debian packages and "
        "starts SLURM's daemons",
    ),
    pytest.mark.skipif(
        shutil.which("apt-get") is None and shutil.which("slurmctld") is None,
        reason="no apt-get to install SLURM from, and no SLURM installed",
    ),
]

# Two policies x two seeds, two runs a job: two batch jobs, then the plan and the report.
EXPERIMENTS = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": [],
    "sim_batch": 2,
    "experiments": [
        {
            "name": "tiny",
            "base": "config/runs/sim_h20_agentic.yaml",
            "matrix": {"policy.name": ["round_robin", "unified"], "seed": [0, 1]},
        }
    ],
    "bench": {"scripts": {}},
}
# A sweep batch: seed 0 of the robustness sweep's smallest scenario (2 instances, 60 sessions),
# every policy of the sweep (its peers and ours) in one job. (Each job costs a Python start and
# a Snakefile parse, 15-50 s on a busy 2-core machine: the test keeps to four jobs.)
SWEEP_TARGET = "results/sweeps/robustness/fleet2/seed0.json"
# What a user of this local cluster sets (docs/cluster.md): the account and partition the script
# made, and jobs small enough for the node (the profile's defaults ask for 2 CPUs, 8 GB).
LOCAL_RESOURCES = [
    "--default-resources",
    "slurm_account=akvc",
    "slurm_partition=akvc",
    "cpus_per_task=1",
    "mem_mb=2000",
    "runtime=20",
]
# The plugin's first status check comes 40 s after a submission by default (sized for busy
# controllers); a local one answers at once.
FAST_POLL = ["--slurm-init-seconds-before-status-checks", "2", "--latency-wait", "10"]


def _cluster(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CLUSTER), *args], capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def slurm() -> None:
    """A running local cluster; stopped afterwards when this fixture started it."""
    was_up = "slurmctld: running" in _cluster("status").stdout
    up = _cluster("up")
    assert up.returncode == 0, up.stdout + up.stderr
    yield
    if not was_up:
        down = _cluster("down")
        assert down.returncode == 0, down.stdout + down.stderr


def _snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _records(root: Path) -> dict[str, str]:
    runs = sorted((root / "results" / "runs").glob("*/requests.jsonl"))
    return {p.parent.name: p.read_text() for p in runs}


def _sweep_runs(root: Path) -> dict[str, pl.DataFrame]:
    files = sorted((root / "results" / "robustness").rglob("*.parquet"))
    return {str(p.relative_to(root)): pl.read_parquet(p) for p in files}


def test_report_and_sweep_through_slurm_equal_local(
    slurm: None, pipeline: Path, tmp_path: Path
) -> None:
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(EXPERIMENTS))
    local = tmp_path / "local"
    shutil.copytree(pipeline, local)

    out = _snakemake(
        pipeline,
        "--profile",
        "workflow/profiles/slurm",
        "--jobs",
        "2",
        *LOCAL_RESOURCES,
        *FAST_POLL,
        "report",
        SWEEP_TARGET,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    submitted = re.findall(r"submitted with SLURM jobid (\d+)", log)
    # 2 run batches, the report's render and the sweep batch (the plan and `report` are local
    # rules).
    assert len(submitted) == 4, log[-4000:]

    # Every job is in the accounting database (what the plugin polled), completed, under the
    # account and partition asked for.
    run_id = re.search(r"SLURM run ID: (\S+)", log)
    assert run_id, log[-2000:]
    acct = subprocess.run(
        [
            "sacct",
            "-a",
            "-X",
            "-n",
            "-P",
            "--name",
            run_id.group(1),
            "-o",
            "JobID,State,Account,Partition",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    rows = [r.split("|") for r in acct]
    assert sorted(r[0] for r in rows) == sorted(submitted)
    assert {tuple(r[1:]) for r in rows} == {("COMPLETED", "akvc", "akvc")}

    ref = _snakemake(local, "--cores", "1", "report", SWEEP_TARGET)
    assert ref.returncode == 0, (ref.stdout + ref.stderr)[-4000:]
    records, ref_records = _records(pipeline), _records(local)
    assert len(records) == 4
    assert records == ref_records  # byte for byte
    sweep, ref_sweep = _sweep_runs(pipeline), _sweep_runs(local)
    rb = load_benchmark("policy_robustness")
    assert len(sweep) == len(rb.PEERS) + len(rb.OURS)  # one run per policy of the sweep
    assert sweep.keys() == ref_sweep.keys()
    for name, df in sweep.items():
        assert df.equals(ref_sweep[name]), name
    assert (pipeline / "REPORT.md").read_text() == (local / "REPORT.md").read_text()
