"""Declared compute minutes against Snakemake benchmark records: over 2x is flagged."""

from __future__ import annotations

import json
from pathlib import Path

from agentic_kvc.analysis.experiments import Plan, PlannedRun
from agentic_kvc.artifact.registry import Claim, Registry
from agentic_kvc.artifact.timing import measure
from tests.artifact.pipeline_helpers import small_claim


def _run(run_id: str, experiment: str) -> PlannedRun:
    return PlannedRun(run_id, experiment, "b.yaml", (), {}, ("sim",), "sim", "round_robin", 0, {})


def _tsv(path: Path, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:00\t1\n")


def test_measured_minutes_sum_the_claims_jobs_and_flag_over_twice(tmp_path: Path) -> None:
    plan = Plan([_run("aaa", "tiny_rr"), _run("bbb", "tiny_lm"), _run("ccc", "other")])
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    reg = Registry({}, [Claim(small_claim("C1", 0.0, "none"))])
    bench = tmp_path / "benchmarks"
    # Batches are per experiment: tiny_rr.0 and tiny_lm.0, one run each.
    _tsv(bench / "claims" / "C1.tsv", 6)
    _tsv(bench / "batches" / "tiny_rr.0.tsv", 30)
    missing = measure(reg, tmp_path / "plan.json", tmp_path, 12)[0]
    assert missing.measured_min is None and missing.missing == 1 and not missing.flagged
    _tsv(bench / "batches" / "tiny_lm.0.tsv", 24)
    ok = measure(reg, tmp_path / "plan.json", tmp_path, 12)[0]
    assert abs(ok.measured_min - 1.0) < 1e-9 and not ok.flagged  # declared 1 min
    _tsv(bench / "batches" / "tiny_lm.0.tsv", 120)
    assert measure(reg, tmp_path / "plan.json", tmp_path, 12)[0].flagged
