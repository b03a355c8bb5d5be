"""The tier_view_sim benchmark's summary: each (lazy-store rule, view) cell is read against
tier_view_real's 0.8-1.2 band; a tier that served nothing is not measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MEASURED, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict


def cell(ratio: float | None) -> dict[str, Any]:
    return {
        "expected_over_served": ratio,
        "expected_over_served_min": ratio,
        "expected_over_served_max": ratio,
        "expected_not_served_share": 0.1,
        "served_not_expected_share": 0.0,
        "engine_host_share": 0.2,
    }


def test_each_cell_is_read_against_the_band(tmp_path: Path) -> None:
    doc = {
        "benchmark": "tier_view_sim",
        "per_cell": {
            "walk/estimated": cell(1.37),
            "walk/exact": cell(0.95),
            "free/estimated": cell(0.79),
            "free/exact": cell(None),
        },
    }
    rows = summarize(tmp_path, "tier_view_sim", doc)
    assert verdict(rows, "estimated view, engines storing after") == NOT_MET
    assert verdict(rows, "exact view, engines storing after") == MET
    assert verdict(rows, "estimated view, engines storing when freed") == NOT_MET
    assert verdict(rows, "exact view, engines storing when freed") == NOT_MEASURED
    walk = next(r for r in rows if r.measure.startswith("estimated view, engines storing after"))
    assert walk.value.startswith("1.37 (runs 1.37-1.37; expected and not served 10.0%")
