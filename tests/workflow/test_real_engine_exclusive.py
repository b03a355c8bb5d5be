"""Jobs that start real engines run alone, even with spare cores: each takes the whole
`machine` resource of the default profile (which the Makefile names), so two CPU fleets, or a
fleet and a simulated batch, never time each other."""

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


def _run_spans(pipeline: Path, config: dict, *extra: str) -> list[tuple[str, float, float]]:
    """(backend, start, end) of every run the fake akvc made, by start."""
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    spans = pipeline / f"spans{len(extra)}.txt"
    spans.unlink(missing_ok=True)
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
    return sorted(((backend, float(a), float(b)) for _, a, b, backend in rows), key=lambda r: r[1])


def _spans(pipeline: Path, *extra: str) -> list[tuple[float, float]]:
    return [(a, b) for _, a, b in _run_spans(pipeline, CONFIG, *extra)]


SIM_AND_REAL = {
    **CONFIG,
    "sim_batch": 1,  # one simulated run per job: two jobs that may run side by side
    "experiments": [
        *CONFIG["experiments"],
        {
            "name": "two_sim",
            "base": "config/runs/sim_agentic.yaml",
            "set": {"workload.generator.sessions": 2},
            "matrix": {"policy.name": ["unified", "round_robin"]},
        },
    ],
}


def test_simulated_jobs_share_the_cores_but_never_run_beside_real_engines(
    pipeline: Path,
) -> None:
    spans = _run_spans(pipeline, SIM_AND_REAL)
    real = [s for kind, *s in spans if kind == "vllm"]
    sim = [s for kind, *s in spans if kind == "sim"]
    assert len(real) == 2 and len(sim) == 2
    overlaps = lambda a, b: a[0] < b[1] and b[0] < a[1]  # noqa: E731
    assert not any(overlaps(r, s) for r in real for s in sim), spans
    # The two simulated jobs did run at once (two cores are used).
    assert overlaps(sim[0], sim[1]), spans
    # Control: with room in `machine` for one real job and one simulated job (not two real
    # ones), a real job runs beside a simulated one: the check above can fail.
    spans = _run_spans(pipeline, SIM_AND_REAL, "--resources", "machine=1001")
    real = [s for kind, *s in spans if kind == "vllm"]
    sim = [s for kind, *s in spans if kind == "sim"]
    assert any(overlaps(r, s) for r in real for s in sim), spans


def test_real_engine_jobs_do_not_overlap(pipeline: Path) -> None:
    (first, second) = _spans(pipeline)
    assert second[0] >= first[1], "two real-engine jobs ran at the same time"
    # Control: the same jobs with the limit lifted do overlap, so the check above can fail.
    (first, second) = _spans(pipeline, "--resources", "machine=2000")
    assert second[0] < first[1]


def test_more_than_one_job_without_a_machine_limit_is_refused(pipeline: Path) -> None:
    """Without a profile nothing limits `machine`, so two jobs at a time could put a real
    fleet beside a simulated batch: the pipeline refuses that at parse time and says what to
    use instead; one job at a time, or the limit given by hand, is accepted."""
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(SIM_AND_REAL, sort_keys=False))

    def dry(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "snakemake", "runs", "-n", *args],
            cwd=pipeline,
            capture_output=True,
            text=True,
            timeout=300,
        )

    for args in (["--cores=2"], ["--jobs=2"]):
        out = dry(*args)
        assert out.returncode != 0, args
        assert "--workflow-profile workflow/profiles/default" in out.stdout + out.stderr
    for args in (
        ["--cores=1"],
        ["--cores=2", "--workflow-profile", "workflow/profiles/default"],
        ["--cores=2", "--resources", "machine=1000"],
    ):
        out = dry(*args)
        assert out.returncode == 0, (args, out.stdout[-2000:] + out.stderr[-2000:])
