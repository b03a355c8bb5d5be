"""The estimate_view_gap summary: per cell, the exact view against the estimate for
predicted_ttft (saying so when no request moved), the gap to sticky_least_loaded with each
view, and each view's error in expected HBM hit tokens."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.test_bench_summary import summarize


def comp(base: str, cand: str, rel: float, differ: int = 5) -> dict:
    return {
        "workload": "trace",
        "host_gib": 16.0,
        "baseline": base,
        "candidate": cand,
        "metric": "ttft_p90",
        "rel_diff": rel,
        "ci_low": rel - 0.1,
        "ci_high": rel + 0.1,
        "n_differ": differ,
    }


def run(variant: str, over: float, under: float) -> dict:
    return {
        "workload": "trace",
        "host_gib": 16.0,
        "variant": variant,
        "over_share": over,
        "under_share": under,
    }


def doc(differ: int) -> dict:
    return {
        "benchmark": "estimate_view_gap",
        "comparisons": [
            comp("predicted_ttft", "predicted_ttft_exact", 0.0 if not differ else -0.05, differ),
            comp("sticky_least_loaded", "predicted_ttft", 0.2),
            comp("sticky_least_loaded", "predicted_ttft_exact", 0.15),
        ],
        "runs": [
            run("predicted_ttft", 0.2, 0.02),
            run("predicted_ttft", 0.1, 0.04),
            run("predicted_ttft_exact", 0.05, 0.0),
        ],
    }


def row(rows: list, words: str) -> str:
    return next(r.value for r in rows if words in r.measure)


def test_a_cell_with_moved_requests(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "estimate_view_gap", doc(differ=5))
    assert row(rows, "exact view vs estimated") == "-5.0% [-15.0, +5.0]"
    gap = row(rows, "vs sticky_least_loaded")
    assert gap == "+20.0% [+10.0, +30.0] / +15.0% [+5.0, +25.0]"
    # The mean over the estimate's runs, then the exact view's.
    assert row(rows, "expected HBM hit minus") == "15.0% over / 3.0% under; 5.0% over / 0.0% under"


def test_a_cell_where_the_views_route_alike(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "estimate_view_gap", doc(differ=0))
    assert row(rows, "exact view vs estimated").startswith("every request placed as with")
