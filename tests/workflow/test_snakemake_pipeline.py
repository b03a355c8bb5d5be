"""The Snakemake pipeline: lint, a Python-API dry run, schema validation, and a full run with a
fake backend proving no-op reruns, single-run regeneration and benchmark handling."""

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


@pytest.mark.parametrize("name", ["config.yaml", "smoke.yaml"])
def test_shipped_experiment_sets_resolve(name: str) -> None:
    """Every run of the shipped experiment sets is a valid config (schema, base, overrides)."""
    import jsonschema

    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    if name == "config.yaml":
        schema = json.loads((REPO / "workflow/schemas/config.schema.json").read_text())
        jsonschema.validate(cfg, schema)
    plan = expand(cfg["experiments"], REPO)
    assert plan.runs
    for exp in {
        r.experiment for r in plan.runs
    }:  # within an experiment, no two entries are one run
        ids = [r.run_id for r in plan.runs if r.experiment == exp]
        assert len(ids) == len(set(ids)), exp
    for run in plan.runs:
        assert (REPO / run.base).is_file()


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

    cfg = yaml.safe_load((pipeline / "config" / "config.yaml").read_text())
    ids = _planned_ids(pipeline)
    assert len(ids) >= 2
    # One planned run is archived (made on hardware we lack): it must be read, not run.
    archived = pipeline / "results" / "archive" / ids[0]
    archived.mkdir(parents=True)
    for f in ("config.json", "requests.jsonl", "instances.jsonl", "summary.json"):
        (archived / f).write_text("{}\n")
    (archived / "manifest.json").write_text(json.dumps({"complete": True}))
    # Simulator profile data: a calibrated file for cpu-tiny, an operator table for GPUs.
    data = pipeline / "src/agentic_kvc/profiles/data"
    data.mkdir(parents=True)
    (data / "cpu-tiny.json").write_text("{}")
    (data / "h100_ops.csv").write_text("op\n")

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
    # Simulated runs come in batch jobs (sim_batch_*), real runs with a repeat in one batch per
    # repeat (real_batch_*), any other run is one akvc_run job.
    made: dict[str, object] = {j.wildcards["run_id"]: j for j in by_rule.get("akvc_run", [])}
    for name, batch_jobs in by_rule.items():
        if name.startswith(("sim_batch_", "real_batch_")):
            for job in batch_jobs:
                for out in map(str, job.output):
                    made.setdefault(Path(out).parent.name, job)
    assert sorted(made) == sorted(ids[1:])
    # Simulated runs depend on the profile data they use (a recalibration reruns them); real
    # runs on none.
    plan = {r.run_id: r for r in expand(cfg["experiments"], pipeline).runs}
    for run_id, job in made.items():
        run = plan[run_id]
        expected = {
            ("sim", "cpu-tiny"): "src/agentic_kvc/profiles/data/cpu-tiny.json",
            ("sim", "h20"): "src/agentic_kvc/profiles/data/h100_ops.csv",
        }.get((run.backend, run.hardware))
        inputs = list(map(str, job.input))
        assert (expected in inputs) if expected else inputs == [], run
    assert {(r.backend, r.hardware) for r in plan.values()} >= {
        ("sim", "h20"),
        ("vllm", "cpu-tiny"),
    }
    assert sorted(j.wildcards["notebook"] for j in by_rule["notebook"]) == sorted(cfg["notebooks"])
    studies = {r.study for r in plan.values() if r.study} | set(cfg["sections"])
    assert {f"study_{s}" for s in studies} <= set(cfg["notebooks"])
    assert len(by_rule["render_report"]) == 1 and len(by_rule["plan"]) == 1
    # Only the cheap, offline benchmarks are part of `report`.
    in_report = {n for n, spec in cfg["bench"]["scripts"].items() if (spec or {}).get("in_report")}
    assert {j.wildcards["bench"] for j in by_rule.get("bench_script", [])} == in_report
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


def test_a_key_named_twice_fails_at_parse_naming_file_and_line(pipeline: Path) -> None:
    """Snakemake's YAML reader keeps the last of two equal keys; the Snakefile refuses them."""
    path = pipeline / "config" / "config.yaml"
    text = path.read_text()
    first = next(line for line in text.splitlines() if line.startswith("results:"))
    path.write_text(text + first + "\n")
    out = snakemake(pipeline, "-n", "--cores", "1", "report")
    assert out.returncode != 0
    said = out.stdout + out.stderr
    assert "key 'results' appears twice in one mapping" in said
    assert f"line {len(text.splitlines()) + 1}," in said and "config.yaml" in said


def test_bad_experiment_fails_at_parse_naming_field(pipeline: Path) -> None:
    cfg = yaml.safe_load((pipeline / "config" / "config.yaml").read_text())
    cfg["experiments"][0].setdefault("set", {})["fleet.instances"] = 0
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake(pipeline, "-n", "--cores", "1", "report")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "field 'fleet.instances'" in text and cfg["experiments"][0]["name"] in text


def test_a_bad_generator_parameter_fails_at_plan_time() -> None:
    """The config's validation leaves generator `params` to the generator; the plan asks it, so
    a bad one fails before any run (it failed in the run's job before)."""
    from agentic_kvc.analysis.experiments import expand_experiment
    from agentic_kvc.config import ConfigError

    exp = {
        "name": "bad_gen",
        "base": "config/runs/sim_agentic.yaml",
        "set": {"workload.generator.params.continue_prob": 2},
    }
    with pytest.raises(ConfigError, match=r"bad_gen.*field 'params.continue_prob'"):
        expand_experiment(exp, REPO)


def test_missing_benchmark_script_fails_at_parse_naming_it(pipeline: Path) -> None:
    cfg = yaml.safe_load((pipeline / "config" / "config.yaml").read_text())
    cfg["bench"]["scripts"]["no_such_bench"] = {"in_report": True}
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake(pipeline, "-n", "--cores", "1", "report")
    assert out.returncode != 0
    assert "bench.scripts.no_such_bench" in out.stdout + out.stderr


# A whole config.yaml (not a --configfile on top of the default one: nested keys would merge
# and bring the default experiments and benchmarks along).
SMALL_CONFIG = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": ["latency_by_policy", "load_balance"],
    # Two experiments: simulated runs are made in batches per experiment, so each run here is
    # its own batch and deleting one redoes exactly that run.
    "experiments": [
        {
            "name": name,
            "base": "config/runs/sim_agentic.yaml",
            "set": {"fleet.instances": 3, "workload.generator.sessions": 4},
            "matrix": {"policy.name": ["round_robin"], "seed": [seed]},
        }
        for name, seed in (("small", 0), ("small2", 1))
    ],
    "bench": {"scripts": {"tiny": {"args": ["--value", "7"], "in_report": True}}},
}

# A benchmark as the real ones are called: `python benchmarks/tiny.py --out FILE ARGS`.
TINY_BENCH = """
import argparse, json, os
ap = argparse.ArgumentParser()
ap.add_argument("--out")
ap.add_argument("--value", type=int)
a = ap.parse_args()
with open(os.environ["FAKE_AKVC_CALLS"], "a") as fh:
    fh.write("bench:tiny\\n")
json.dump({"median_us": a.value, "rows": [{"case": "x"}]}, open(a.out, "w"))
"""


def _run_report(root: Path, calls: Path) -> subprocess.CompletedProcess:
    return snakemake(
        root,
        "--cores",
        "1",
        "report",
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


def _run_calls(calls: Path) -> list[str]:
    return [c for c in calls.read_text().split() if not c.startswith("bench:")]


def test_full_pipeline_reruns_nothing_and_regenerates_one_run(pipeline: Path) -> None:
    if shutil.which("papermill", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("papermill not installed next to this Python")
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(SMALL_CONFIG))
    (pipeline / "benchmarks" / "tiny.py").write_text(TINY_BENCH)
    # The analysis code the notebooks and the report watch (ANALYSIS_CODE): the files of a
    # checkout, so the copy gets them too (the installed package is what runs).
    analysis = REPO / "src" / "agentic_kvc" / "analysis"
    shutil.copytree(
        analysis,
        pipeline / "src/agentic_kvc/analysis",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy2(REPO / "src/agentic_kvc/paired.py", pipeline / "src/agentic_kvc/paired.py")
    calls = pipeline / "calls.txt"
    first = _run_report(pipeline, calls)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    ids = sorted(_run_calls(calls))
    assert len(ids) == 2
    # Per-run rows are on the page REPORT.md links to (results/report/runs.md).
    report = (pipeline / "REPORT.md").read_text()
    report += (pipeline / "results" / "report" / "runs.md").read_text()
    for run_id in ids:
        recs = [r for r in read_jsonl(pipeline / f"results/runs/{run_id}/requests.jsonl")]
        ok = [r["ttft_s"] for r in recs if not r["error"]]
        p50 = f"{np.percentile(ok, 50) * 1000:.1f}"
        row = next(line for line in report.splitlines() if line.startswith(f"| `{run_id}` | small"))
        assert f"| {p50} |" in row
    # The in-report benchmark ran once, with its args, and its numbers are in the report.
    assert calls.read_text().split().count("bench:tiny") == 1
    assert "### tiny" in report and "| median_us | 7 |" in report
    assert "(results/bench/tiny.json)" in report  # the raw JSON linked, not flattened
    for nb in ("latency_by_policy", "load_balance"):
        assert (pipeline / f"results/notebooks/{nb}.ipynb").is_file()
        assert list((pipeline / f"results/tables/{nb}").glob("*.csv"))
        assert list((pipeline / f"results/figures/{nb}").glob("*.png"))

    again = _run_report(pipeline, calls)
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
    assert sorted(_run_calls(calls)) == ids
    assert calls.read_text().split().count("bench:tiny") == 1

    (pipeline / f"results/runs/{ids[1]}/requests.jsonl").unlink()
    redo = _run_report(pipeline, calls)
    assert redo.returncode == 0, redo.stdout[-3000:] + redo.stderr[-3000:]
    assert _run_calls(calls).count(ids[1]) == 2  # exactly that run, once more
    assert _run_calls(calls).count(ids[0]) == 1
    jobs = _jobs_run(redo)
    assert sum(j.startswith("sim_batch_") for j in jobs) == 1 and "render_report" in jobs
    assert "bench_script" not in jobs

    # A benchmark run by hand (not configured): only the report is re-rendered to show it.
    (pipeline / "results" / "bench" / "by_hand.json").write_text(json.dumps({"p50_us": 3.5}))
    shown = _run_report(pipeline, calls)
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    assert set(_jobs_run(shown)) == {"render_report", "report"}
    assert "### by_hand" in (pipeline / "REPORT.md").read_text()
    assert "| p50_us | 3.5 |" in (pipeline / "REPORT.md").read_text()
    final = _run_report(pipeline, calls)
    assert "Nothing to be done" in final.stdout + final.stderr

    # An edited analysis module runs the notebooks again, not only the report's rendering
    # (before: a study's changed text stayed out of its section until its notebook was forced).
    module = pipeline / "src/agentic_kvc/analysis/studies/common.py"
    module.write_text(module.read_text() + "# edited\n")  # (a touch alone is no change to it)
    edited = snakemake(
        pipeline, "-n", "--cores", "1", "report", "--config", f"akvc={sys.executable} {FAKE_AKVC}"
    )
    jobs = set(_jobs_run(edited))
    assert {"notebook", "render_report"} <= jobs and not any(
        j.startswith("sim_batch_") for j in jobs
    )


def test_the_wider_tiers_router_set_runs_with_the_command_its_file_gives(pipeline: Path) -> None:
    """config/tiers_full.yaml's header (and the tiers study's text) name the command that runs
    it. Before: its target came after `--configfile`, which takes every path after it as a
    config file, so Snakemake read the notebook as a config and refused it."""
    header = (pipeline / "config" / "tiers_full.yaml").read_text().splitlines()
    (cmd,) = [line for line in header if "snakemake" in line and line.startswith("#")]
    args = cmd.split("snakemake", 1)[1].split()
    out = snakemake(pipeline, "-n", *args)
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert "sim_batch_tiers_agentic_full" in said and "notebook" in said
