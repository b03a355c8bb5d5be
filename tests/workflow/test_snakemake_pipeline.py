"""The Snakemake pipeline: lint, a Python-API dry run, schema validation, and (slow) a full run
with a fake backend proving no-op reruns and single-run regeneration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from agentic_kvc.analysis.experiments import expand
from agentic_kvc.io import read_jsonl

REPO = Path(__file__).resolve().parents[2]
FAKE_AKVC = Path(__file__).with_name("fake_akvc.py")


def snakemake(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def test_lint_is_clean() -> None:
    out = snakemake(REPO, "--lint")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Lints for" not in out.stdout + out.stderr


def _planned_ids(root: Path) -> list[str]:
    cfg = yaml.safe_load((root / "config" / "config.yaml").read_text())
    return expand(cfg["experiments"], root).run_ids()


def test_dry_run_of_report_through_python_api(pipeline: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import (
        DAGSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
    )

    ids = _planned_ids(pipeline)
    assert len(ids) >= 2
    # One planned run is archived (made on hardware we lack): it must be read, not run.
    archived = pipeline / "results" / "archive" / ids[0]
    archived.mkdir(parents=True)
    for f in ("config.json", "requests.jsonl", "instances.jsonl", "summary.json"):
        (archived / f).write_text("{}\n")
    (archived / "manifest.json").write_text(json.dumps({"complete": True}))

    monkeypatch.chdir(pipeline)
    with SnakemakeApi(OutputSettings(dryrun=True, quiet={Quietness.ALL})) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            storage_settings=StorageSettings(),
            snakefile=pipeline / "Snakefile",
            workdir=pipeline,
        )
        dag_api = workflow_api.dag(DAGSettings(targets={"report"}))
        dag_api.execute_workflow(executor="dryrun")
        # Private attribute: the public API has no job listing for a dry run.
        jobs = list(workflow_api._workflow.dag.jobs)
    by_rule: dict[str, list] = {}
    for job in jobs:
        by_rule.setdefault(job.rule.name, []).append(job)
    assert sorted(j.wildcards["run_id"] for j in by_rule["akvc_run"]) == sorted(ids[1:])
    assert sorted(j.wildcards["notebook"] for j in by_rule["notebook"]) == [
        "latency_by_policy",
        "load_balance",
    ]
    assert len(by_rule["render_report"]) == 1 and len(by_rule["plan"]) == 1
    report_inputs = set(map(str, by_rule["render_report"][0].input))
    assert f"results/archive/{ids[0]}/requests.jsonl" in report_inputs


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"experimentz": []}, "experimentz"),
        ({"experiments": [{"name": "x"}]}, "base"),
        ({"experiments": [{"name": "x", "base": "b.yaml", "matrix": {"seed": []}}]}, "seed"),
    ],
)
def test_schema_rejects_bad_config(pipeline: Path, patch: dict, needle: str) -> None:
    cfg = yaml.safe_load((pipeline / "config" / "config.yaml").read_text())
    cfg.update(patch)
    bad = pipeline / "config" / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    # --configfile extends config.yaml; replace it so the bad file is all there is.
    (pipeline / "config" / "config.yaml").write_text(bad.read_text())
    out = snakemake(pipeline, "-n", "--cores", "1", "report")
    assert out.returncode != 0
    assert needle in out.stdout + out.stderr


def test_bad_experiment_fails_at_parse_naming_field(pipeline: Path) -> None:
    cfg = yaml.safe_load((pipeline / "config" / "config.yaml").read_text())
    cfg["experiments"][0].setdefault("set", {})["fleet.instances"] = 0
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake(pipeline, "-n", "--cores", "1", "report")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "field 'fleet.instances'" in text and cfg["experiments"][0]["name"] in text


SMALL_CONFIG = {
    "experiments": [
        {
            "name": "small",
            "base": "config/runs/sim_agentic.yaml",
            "set": {"fleet.instances": 3, "workload.generator.sessions": 4},
            "matrix": {"policy.name": ["round_robin"], "seed": [0, 1]},
        }
    ],
}


def _run_report(root: Path, calls: Path) -> subprocess.CompletedProcess:
    return snakemake(
        root,
        "--cores",
        "1",
        "report",
        "--configfile",
        "config/small.yaml",
        "--config",
        f"akvc={sys.executable} {FAKE_AKVC}",
        env={"FAKE_AKVC_CALLS": str(calls)},
    )


def _jobs_run(out: subprocess.CompletedProcess) -> list[str]:
    return [
        line.split()[-1].rstrip(":")
        for line in (out.stdout + out.stderr).splitlines()
        if line.startswith(("rule ", "localrule "))
    ]


@pytest.mark.slow
def test_full_pipeline_reruns_nothing_and_regenerates_one_run(pipeline: Path) -> None:
    if shutil.which("papermill", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("papermill not installed next to this Python")
    (pipeline / "config" / "small.yaml").write_text(yaml.safe_dump(SMALL_CONFIG))
    calls = pipeline / "calls.txt"
    first = _run_report(pipeline, calls)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    ids = sorted(calls.read_text().split())
    assert len(ids) == 2
    report = (pipeline / "REPORT.md").read_text()
    for run_id in ids:
        recs = [r for r in read_jsonl(pipeline / f"results/runs/{run_id}/requests.jsonl")]
        ok = [r["ttft_s"] for r in recs if not r["error"]]
        p50 = f"{np.percentile(ok, 50) * 1000:.1f}"
        row = next(line for line in report.splitlines() if line.startswith(f"| `{run_id}` | small"))
        assert f"| {p50} |" in row
    for nb in ("latency_by_policy", "load_balance"):
        assert (pipeline / f"results/notebooks/{nb}.ipynb").is_file()
        assert list((pipeline / f"results/tables/{nb}").glob("*.csv"))
        assert list((pipeline / f"results/figures/{nb}").glob("*.png"))

    again = _run_report(pipeline, calls)
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
    assert sorted(calls.read_text().split()) == ids

    (pipeline / f"results/runs/{ids[1]}/requests.jsonl").unlink()
    redo = _run_report(pipeline, calls)
    assert redo.returncode == 0, redo.stdout[-3000:] + redo.stderr[-3000:]
    assert calls.read_text().split().count(ids[1]) == 2  # exactly that run, once more
    assert calls.read_text().split().count(ids[0]) == 1
    jobs = _jobs_run(redo)
    assert jobs.count("akvc_run") == 1 and "render_report" in jobs
