"""REPORT.md rendering: numbers from records, provenance, bench section, missing runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from agentic_kvc.analysis.report import bench_sections, build_context, fmt_ms, render
from agentic_kvc.io import read_jsonl

TEMPLATE = Path(__file__).resolve().parents[2] / "workflow" / "report" / "REPORT.md.j2"


def test_report_numbers_come_from_records(tree) -> None:  # type: ignore[no-untyped-def]
    ctx = build_context(tree.results, tree.archive, tree.plan, tree.root)
    text = render(TEMPLATE, ctx)
    assert ctx["missing"] == [tree.broken_id]
    assert "**Missing runs**" in text and tree.broken_id in text
    rows = {r["run_id"]: r for r in ctx["runs"]}
    assert set(rows) == set(tree.plan.run_ids()) - {tree.broken_id}
    for run_id, row in rows.items():
        src = "archive" if run_id == tree.archived_id else "results/runs"
        base = tree.archive if src == "archive" else tree.results / "runs"
        recs = [r for r in read_jsonl(base / run_id / "requests.jsonl") if not r["error"]]
        p99 = np.percentile([r["ttft_s"] for r in recs], 99)
        assert row["ttft_p99"] == fmt_ms(p99)
        assert f"| `{run_id}` |" in text
    prov = {p["run_id"]: p for p in ctx["provenance"]}
    assert prov[tree.archived_id]["source"] == "archive"
    assert "x5 (closed)" in prov[tree.archived_id]["workload"]


def test_bench_section_is_generic(tmp_path: Path) -> None:
    (tmp_path / "rows.json").write_text(
        json.dumps({"device": "cpu", "rows": [{"tokens": 16, "t": {"p50": 0.5}}, {"tokens": 32}]})
    )
    (tmp_path / "flat.json").write_text(json.dumps({"a": 1, "b": {"c": [1, 2]}}))
    (tmp_path / "named.json").write_text(
        json.dumps({"results": {"direct": {"p50": 1.0}, "proxy": {"p50": 2.5, "n": 3}}})
    )
    (tmp_path / "broken.json").write_text("{nope")
    secs = {s["name"]: s for s in bench_sections(tmp_path.glob("*.json"))}
    assert secs["rows"]["columns"] == ["tokens", "t.p50"]
    assert secs["rows"]["rows"] == [["16", "0.5"], ["32", ""]]
    assert secs["rows"]["meta"] == {"device": "cpu"}
    assert secs["flat"]["meta"] == {"a": "1", "b.c": "1, 2"}
    assert secs["named"]["columns"] == ["metric", "direct", "proxy"]
    assert secs["named"]["rows"] == [["p50", "1", "2.5"], ["n", "", "3"]]
    assert "unreadable" in secs["broken"]["error"]


def test_report_renders_with_no_runs(tmp_path: Path) -> None:
    text = render(TEMPLATE, build_context(tmp_path, None, None, tmp_path))
    assert "0 complete run(s)" in text
