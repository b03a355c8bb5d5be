"""The finish_first benchmark's summary applies the pre-registered rule to the paired
comparisons (docs/kv_tiers/pause_aware.md): helped somewhere (a TTFT p90 interval below 0),
hurt nowhere (no TTFT or E2E p90 interval above 0)."""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict


def comp(metric: str, rel: float, lo: float, hi: float, host: float = 0.0) -> dict:
    return {
        "policy": "predicted_ttft",
        "workload": "agentic_hi",
        "host_gib": host,
        "baseline": "none",
        "candidate": "finish_first",
        "metric": metric,
        "rel_diff": rel,
        "ci_low": lo,
        "ci_high": hi,
    }


def doc(*comps: dict) -> dict:
    return {"benchmark": "finish_first", "comparisons": list(comps)}


HELPED = comp("ttft_p90", -0.2, -0.35, -0.03)
FLAT = comp("ttft_p90", -0.05, -0.15, +0.07, host=16.0)
E2E_FLAT = comp("e2e_p90", 0.01, -0.05, 0.06)


def test_helped_somewhere_and_hurt_nowhere_meets_both_halves(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "finish_first", doc(HELPED, FLAT, E2E_FLAT))
    assert verdict(rows, "significantly lower in") == MET
    assert verdict(rows, "TTFT or E2E p90 significantly higher") == MET
    lower = next(r for r in rows if "significantly lower in" in r.measure)
    assert lower.value.startswith("1 of 2 ") and "HBM only" in lower.value
    largest = next(r for r in rows if r.measure.startswith("largest TTFT p90 change"))
    assert largest.value.startswith("-20.0% [-35.0, -3.0]")


def test_no_significant_gain_fails_the_first_half(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "finish_first", doc(FLAT, E2E_FLAT))
    assert verdict(rows, "significantly lower in") == NOT_MET


def test_an_e2e_loss_fails_the_second_half(tmp_path: Path) -> None:
    worse = comp("e2e_p90", 0.12, 0.02, 0.25, host=16.0)
    rows = summarize(tmp_path, "finish_first", doc(HELPED, worse))
    assert verdict(rows, "TTFT or E2E p90 significantly higher") == NOT_MET
    higher = next(r for r in rows if "TTFT or E2E p90 significantly higher" in r.measure)
    assert "host 16 GiB" in higher.value and "e2e_p90" in higher.value


def test_the_chance_row_is_the_binomial_tail(tmp_path: Path) -> None:
    # One of two TTFT p90 intervals below 0: with no effect each is below with p = 0.025,
    # so at least one of two is 1 - 0.975^2 = 4.9%.
    rows = summarize(tmp_path, "finish_first", doc(HELPED, FLAT))
    chance = next(r for r in rows if r.measure.startswith("chance of as many lower"))
    assert chance.value == "4.9%"


def test_told_applies_the_rule_and_reports_the_estimates_error(tmp_path: Path) -> None:
    told = {**HELPED, "baseline": "finish_first_untold"}
    runs = [
        {"placement": "finish_first", "estimate_error_share": 0.01},
        {"placement": "finish_first", "estimate_error_share": 0.03},
        {"placement": "finish_first_untold", "estimate_error_share": 0.05},
        {"placement": "pause", "estimate_error_share": None},
    ]
    d = {"benchmark": "finish_first_told", "comparisons": [told, E2E_FLAT], "runs": runs}
    rows = summarize(tmp_path, "finish_first_told", d)
    lower = next(r for r in rows if "significantly lower in" in r.measure)
    assert "against the router not told" in lower.measure and lower.verdict == MET
    err = next(r for r in rows if "estimate's error" in r.measure)
    assert err.value == "finish_first: 2.0% told, 5.0% not"  # pause: no error measured
