"""Helpers for the artifact tests: the repository, a small experiment set and claim, and the
pipeline's commands (a module of its own: test folders' conftests share one module name)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PARTS = ("Snakefile", "workflow", "config", "notebooks", "envs", "benchmarks", "artifact")

# Two simulated experiments on the small CPU base (seconds each): round-robin and LMetric, two
# seeds, so a claim comparing them has two pairs.
SMALL_CONFIG = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": [],
    "experiments": [
        {
            "name": name,
            "study": "tiny",
            "base": "config/runs/sim_agentic.yaml",
            "set": {"fleet.instances": 2, "workload.generator.sessions": 6},
            "matrix": {"policy.name": [policy], "seed": [0, 1]},
        }
        for name, policy in (("tiny_rr", "round_robin"), ("tiny_lm", "lmetric"))
    ],
    "bench": {"scripts": {}},
}


def small_claim(claim_id: str, reference: float, direction: str) -> dict:
    return {
        "id": claim_id,
        "study": "tiny",
        "statement": "LMetric against round-robin on a tiny simulated fleet (test claim).",
        "target": f"claim_{claim_id}",
        "kind": "paired",
        "experiments": ["tiny_rr", "tiny_lm"],
        "metric": "ttft_p90" if claim_id == "C1" else "e2e_p90",
        "baseline": {"variant": "round_robin"},
        "candidate": {"variant": "lmetric"},
        "direction": direction,
        **({"equivalence_margin": 1.0} if direction == "none" else {}),
        "reference": reference,
        "tolerance": {"kind": "absolute", "value": 0.05},
        "tier": "sim",
        "minutes": {"human": 1, "compute": 1},
    }


def run_module(cwd: Path, module: str, *args: str, timeout: int) -> subprocess.CompletedProcess:
    """`python -m module args` in `cwd` with this interpreter, its venv's bin first on PATH
    (Snakemake's shell rules call `akvc` by name)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
    )


def snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_module(cwd, "snakemake", *args, timeout=600)


def akvc(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_module(cwd, "agentic_kvc.cli", *args, timeout=300)
