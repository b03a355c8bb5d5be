"""Jobs that start real engines run one at a time, even with spare cores: the default profile
(which the Makefile names) limits the `real_engine` resource to 1 (two CPU fleets side by side
would time each other)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

FAKE_AKVC = Path(__file__).with_name("fake_akvc.py")

# Two unbatched real runs (no `repeat` key): two separate jobs that could run side by side.
CONFIG = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": [],
    "experiments": [
        {
            "name": "two_real",
            "base": "config/runs/sim_agentic.yaml",
            "set": {
                "backend": "vllm",
                "fleet.hardware": "cpu-tiny",
                "fleet.instances": 1,
                "workload.generator.sessions": 2,
            },
            "matrix": {"policy.name": ["unified", "round_robin"]},
        }
    ],
}


def _spans(pipeline: Path, *extra: str) -> list[tuple[float, float]]:
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    spans = pipeline / f"spans{len(extra)}.txt"
    akvc = f"akvc={sys.executable} {FAKE_AKVC}"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores=2",
            "--workflow-profile",
            "workflow/profiles/default",
            "runs",
            "--forceall",
            *extra,
            "--config",
            akvc,
        ],
        cwd=pipeline,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "FAKE_AKVC_SPANS": str(spans), "FAKE_AKVC_SLEEP": "2"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [line.split() for line in spans.read_text().splitlines()]
    return sorted((float(start), float(end)) for _, start, end in rows)


def test_real_engine_jobs_do_not_overlap(pipeline: Path) -> None:
    (first, second) = _spans(pipeline)
    assert second[0] >= first[1], "two real-engine jobs ran at the same time"
    # Control: the same jobs with the limit lifted do overlap, so the check above can fail.
    (first, second) = _spans(pipeline, "--resources", "real_engine=2")
    assert second[0] < first[1]
