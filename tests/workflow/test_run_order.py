"""Real runs go by repeat, in one batch (one fleet): repeats interleave across variants, and
each variant takes each position within a repeat in turn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from agentic_kvc.analysis.experiments import expand

FAKE_AKVC = Path(__file__).with_name("fake_akvc.py")

# Policy before repeat in the matrix: the plan is policy-major, the run order must not be.
ORDER_CONFIG = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": [],
    "experiments": [
        {
            "name": "interleaved",
            "base": "config/runs/sim_agentic.yaml",
            # Real runs (the fake akvc serves any backend): one batch job, in the plan's order.
            "set": {
                "backend": "vllm",
                "fleet.hardware": "cpu-tiny",
                "fleet.instances": 2,
                "workload.generator.sessions": 2,
            },
            "matrix": {
                "policy.name": ["unified", "round_robin", "lmetric"],
                "repeat": [0, 1, 2],
            },
        }
    ],
}


AKVC = f"akvc={sys.executable} {FAKE_AKVC}"


def test_runs_start_repeat_major(pipeline: Path) -> None:
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(ORDER_CONFIG, sort_keys=False))
    calls = pipeline / "calls.txt"
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "runs", "--config", AKVC],
        cwd=pipeline,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "FAKE_AKVC_CALLS": str(calls)},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    plan = expand(ORDER_CONFIG["experiments"], root=pipeline)
    assert len(set(plan.to_run())) == 9  # every repeat is a distinct run
    ran = [plan.first(r) for r in calls.read_text().split()]
    assert [r.labels["repeat"] for r in ran] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # One batch (one fleet), repeat by repeat, the variants' order rotated by the repeat index.
    policies = [r.policy for r in ran]
    assert policies[:3] == ["unified", "round_robin", "lmetric"]
    assert policies[3:6] == ["round_robin", "lmetric", "unified"]
    assert policies[6:] == ["lmetric", "unified", "round_robin"]
