"""Wall time of a small sweep target on the local SLURM at 1 and 2 job slots vs `--cores 1`.

The target is one scenario of the robustness sweep (workflow/rules/sweeps.smk): a job per
seed (8 policies each), then the scenario's analysis. It runs three times, each in a fresh
copy of the pipeline: `snakemake --cores 1` (no SLURM), then through the slurm profile with
`--jobs 1` and `--jobs 2` (job slots: jobs SLURM runs at once, each asking for one CPU of the
node). Per SLURM job, `sacct` gives the queue wait and the job's own elapsed time, so the
overhead of a job (Python start-up, the Snakefile parsed again in the job, the plugin's
polling) is visible beside the sweep's own work. The runs' records must be the same in all
three (simulated runs are deterministic). Needs the local cluster up:

    sudo workflow/slurm/local_cluster.sh up
    .venv/bin/python benchmarks/slurm_sweep.py --out results/bench/slurm_sweep.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

REPO = Path(__file__).resolve().parents[1]
PARTS = ("Snakefile", "workflow", "config", "notebooks", "envs", "benchmarks", "artifact")
CONFIG = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": [],
    "experiments": [
        {
            "name": "unused",
            "base": "config/runs/sim_h20_agentic.yaml",
            "matrix": {"seed": [0]},
        }
    ],
    "bench": {"scripts": {}},
}
# The local cluster's account and partition (workflow/slurm/local_cluster.sh), one CPU a job.
SLURM_ARGS = [
    "--profile",
    "workflow/profiles/slurm",
    "--default-resources",
    "slurm_account=akvc",
    "slurm_partition=akvc",
    "cpus_per_task=1",
    "mem_mb=2000",
    "runtime=20",
    "--latency-wait",
    "10",
]


def copy_pipeline(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for part in PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / part)
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    return dest


def sacct_jobs(run_id: str) -> list[dict]:
    """Each job of a Snakemake SLURM run (its jobs are named by the run id)."""
    out = subprocess.run(
        ["sacct", "-a", "-X", "-n", "-P", "--name", run_id, "-o", "JobID,State,Submit,Start,End"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.split():
        job, state, submit, start, end = line.split("|")
        t = [time.mktime(time.strptime(x, "%Y-%m-%dT%H:%M:%S")) for x in (submit, start, end)]
        rows.append({"job": job, "state": state, "wait_s": t[1] - t[0], "elapsed_s": t[2] - t[1]})
    return rows


def run(root: Path, target: str, extra: list[str]) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", *extra, target],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - t0
    log = out.stdout + out.stderr
    if out.returncode != 0:
        raise SystemExit(f"snakemake {' '.join(extra)} {target} failed:\n{log[-3000:]}")
    res: dict = {"wall_s": round(wall, 1), "args": extra}
    m = re.search(r"SLURM run ID: (\S+)", log)
    if m:
        jobs = sacct_jobs(m.group(1))
        res["slurm_jobs"] = len(jobs)
        res["job_elapsed_s"] = [j["elapsed_s"] for j in jobs]
        res["job_wait_s"] = [j["wait_s"] for j in jobs]
        res["states"] = sorted({j["state"] for j in jobs})
    return res


def records(root: Path) -> dict[str, pl.DataFrame]:
    files = sorted((root / "results" / "robustness").rglob("*.parquet"))
    return {str(p.relative_to(root)): pl.read_parquet(p) for p in files}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenario", default="fleet2", help="robustness scenario (5 seeds)")
    ap.add_argument(
        "--poll-s",
        type=int,
        default=2,
        help="the plugin's first status check after a submission (its default: 40 s)",
    )
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if shutil.which("sinfo") is None or subprocess.run(["sinfo"], capture_output=True).returncode:
        raise SystemExit("no SLURM answering: sudo workflow/slurm/local_cluster.sh up")
    target = f"results/sweeps/robustness/{a.scenario}.json"
    poll = ["--slurm-init-seconds-before-status-checks", str(a.poll_s)]
    modes = {
        "local_cores1": ["--cores", "1"],
        "slurm_jobs1": [*SLURM_ARGS, *poll, "--jobs", "1"],
        "slurm_jobs2": [*SLURM_ARGS, *poll, "--jobs", "2"],
    }
    results, recs = {}, {}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="akvc_slurm_bench_") as tmp:
        for name, args in modes.items():
            root = copy_pipeline(Path(tmp) / name)
            results[name] = run(root, target, args)
            recs[name] = records(root)
            print(name, json.dumps(results[name]), flush=True)
    ref = recs["local_cores1"]
    same = all(
        r.keys() == ref.keys() and all(df.equals(ref[k]) for k, df in r.items())
        for r in recs.values()
    )
    doc = {
        "benchmark": "slurm_sweep",
        "target": target,
        "runs": len(ref),
        "records_equal": same,
        "cpus": os.cpu_count(),
        "load1_before": round(load0, 2),
        "load1_after": round(os.getloadavg()[0], 2),
        "poll_s": a.poll_s,
        "modes": results,
        "speedup_slurm2_vs_slurm1": round(
            results["slurm_jobs1"]["wall_s"] / results["slurm_jobs2"]["wall_s"], 2
        ),
        "slurm2_vs_local": round(
            results["slurm_jobs2"]["wall_s"] / results["local_cores1"]["wall_s"], 2
        ),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "modes"}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
