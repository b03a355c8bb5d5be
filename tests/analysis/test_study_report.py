"""Studies into REPORT.md: sampled cells recomputed from the records; byte-identical reruns.

A small evolution study (three policies plus unified without its ceiling, three seeds, a
two-instance simulated fleet) is run for real in the simulator, analysed by its study module
and rendered through the report template, as the pipeline does.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from agentic_kvc.analysis.experiments import expand
from agentic_kvc.analysis.report import build_context, render
from agentic_kvc.analysis.studies import run_study
from agentic_kvc.config import load_config
from agentic_kvc.io import read_jsonl
from agentic_kvc.runs import execute

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "workflow" / "report" / "REPORT.md.j2"
BASE = {
    "backend": "sim",
    "workload": {"generator": {"preset": "agentic-coding", "sessions": 10}},
    "fleet": {"instances": 2, "model": "qwen3-coder-30b-a3b", "hardware": "h20"},
}
EXPERIMENTS = [
    {
        "name": "evolution",
        "study": "evolution",
        "base": "base.yaml",
        "matrix": {"policy.name": ["round_robin", "lmetric", "unified"], "seed": [0, 1, 2]},
    },
    {
        "name": "evolution_no_ceiling",
        "study": "evolution",
        "variant": "unified (no ceiling)",
        "base": "base.yaml",
        "set": {"policy.name": "unified", "policy.params.request_ceiling": None},
        "matrix": {"seed": [0, 1, 2]},
    },
]


@pytest.fixture(scope="module")
def study_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("study")
    (root / "base.yaml").write_text(yaml.safe_dump(BASE))
    plan = expand(EXPERIMENTS, root)
    for planned in plan.runs:
        execute(load_config(root / planned.base, list(planned.overrides)), root / "results")
    (root / "results" / "work").mkdir(parents=True)
    (root / "results" / "work" / "plan.json").write_text(json.dumps(plan.to_json()))
    return root


def _render(root: Path, tag: str) -> tuple[str, str]:
    results = root / "results"
    tables = results / "tables" / "study_evolution"
    section = run_study(
        "evolution",
        results,
        None,
        results / "work" / "plan.json",
        tables,
        results / "figures" / f"study_evolution_{tag}",
    )
    plan = expand(EXPERIMENTS, root)
    ctx = build_context(results, None, plan, root)
    # The report and the per-run page it links to (Appendix: one row per run).
    runs = render(TEMPLATE.with_name("RUNS.md.j2"), ctx)
    return section.markdown(), render(TEMPLATE, ctx) + "\n" + runs


def _table(text: str, first_header: str) -> list[dict[str, str]]:
    """The markdown table whose first header cell is `first_header`, as dicts."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in ln.strip("|").split("|")), strict=True)))
    return rows


def _records(root: Path, run_ids: list[str]) -> list[dict]:
    out = []
    for rid in run_ids:
        out += [r for r in read_jsonl(root / "results" / "runs" / rid / "requests.jsonl")]
    return out


def _ok(recs: list[dict], key: str) -> np.ndarray:
    return np.array([r[key] for r in recs if not r.get("error") and r.get(key) is not None])


def test_sampled_report_cells_recompute_from_records(study_tree: Path) -> None:
    _, report = _render(study_tree, "a")
    plan = expand(EXPERIMENTS, study_tree)
    cells: list[tuple[str, str, float]] = []  # (where, rendered text, recomputed value)
    # The study's table: one row per variant, seeds pooled.
    by_variant: dict[str, list[str]] = {}
    for p in plan.runs:
        by_variant.setdefault(p.variant or p.policy, []).append(p.run_id)
    for row in _table(report, "variant"):
        recs = _records(study_tree, by_variant[row["variant"]])
        assert row["requests"] == str(len(recs))
        ttft, e2e = _ok(recs, "ttft_s"), _ok(recs, "e2e_s")
        v = row["variant"]
        cells += [
            (f"{v} TTFT p50", row["TTFT p50 (ms)"], np.percentile(ttft, 50) * 1000),
            (f"{v} TTFT p90", row["TTFT p90 (ms)"], np.percentile(ttft, 90) * 1000),
            (f"{v} E2E p90", row["E2E p90 (s)"], np.percentile(e2e, 90)),
        ]
    # The per-run page: one row per run.
    for row in _table(report, "run_id"):
        recs = _records(study_tree, [row["run_id"].strip("`")])
        ttft, e2e = _ok(recs, "ttft_s"), _ok(recs, "e2e_s")
        hit = sum(r["cached_tokens"] for r in recs) / sum(r["input_tokens"] for r in recs)
        rid = row["run_id"]
        cells += [
            (f"{rid} TTFT p50", row["TTFT p50"], np.percentile(ttft, 50) * 1000),
            (f"{rid} TTFT p99", row["TTFT p99"], np.percentile(ttft, 99) * 1000),
            (f"{rid} E2E p50", row["E2E p50"], np.percentile(e2e, 50)),
            (f"{rid} hit rate", row["hit rate"].rstrip("%"), hit * 100),
        ]
    sample = random.Random(0).sample(cells, 24)
    for where, text, value in sample:
        decimals = len(text.split(".", 1)[1]) if "." in text else 0
        assert float(text) == pytest.approx(value, abs=0.51 * 10**-decimals), where


def test_intervals_and_answer_are_in_the_section(study_tree: Path) -> None:
    section, report = _render(study_tree, "b")
    assert section in report
    row = {r["variant"]: r for r in _table(section, "variant")}["unified"]
    assert re.fullmatch(r"[+-]\d+\.\d% \[[+-]\d+\.\d, [+-]\d+\.\d\]( n\.s\.)?", row["vs RR"])
    assert "**Answer.**" in section and "round-robin" in section
    assert "## Findings" in report and "unified vs round_robin, TTFT p90" in report


def test_simulated_sections_regenerate_byte_for_byte(study_tree: Path) -> None:
    first_section, first_report = _render(study_tree, "c")
    again_section, again_report = _render(study_tree, "c")
    assert first_section == again_section
    assert first_report == again_report
