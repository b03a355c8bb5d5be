"""The sim_tiers_overhead benchmark's summary: the verdict is the worst row's CPU-time ratio
against 1.5x, recomputed from the times (not the script's pass flag)."""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.analysis.bench_summary.core import MET, NO_GOAL, NOT_MEASURED, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict


def row(seed: int, off: float, on: float, engine: float) -> dict:
    return {
        "config": "agentic_long",
        "policy": "round_robin",
        "seed": seed,
        "hbm_only": {"cpu_s": off},
        "tiers": {"cpu_s": on},
        "cpu_ratio": 99.0,  # stale: the summary recomputes it
        "engine_cpu_ratio": engine,
    }


def doc(worst_on: float) -> dict:
    rows = [row(0, 1.0, 1.2, 1.1), row(1, 2.0, worst_on, 1.3), row(2, 1.0, 1.3, 1.2)]
    return {"benchmark": "sim_tiers_overhead", "results": rows, "pass": True}


def test_worst_row_decides_at_the_goal(tmp_path: Path) -> None:
    assert verdict(summarize(tmp_path, "sim_tiers_overhead", doc(2.99)), "worst of") == MET
    rows = summarize(tmp_path, "sim_tiers_overhead", doc(3.01))
    assert verdict(rows, "worst of") == NOT_MET
    worst = next(r for r in rows if "worst of 3" in r.measure)
    assert worst.value.startswith("1.5x (agentic_long, round_robin, seed 1: 2 -> 3.01 s)")
    by = {r.measure: r for r in rows}
    assert by["tiers on / HBM only, CPU time: median"].value == "1.3x"
    assert by["tiers on / HBM only, CPU time: median"].verdict == NO_GOAL
    engine = "the engine's tiers alone (router's view as HBM only): worst / median"
    assert by[engine].value == "1.3x / 1.2x"


def test_no_rows_is_not_measured(tmp_path: Path) -> None:
    empty = {"benchmark": "sim_tiers_overhead", "results": []}
    assert summarize(tmp_path, "sim_tiers_overhead", empty)[0].verdict == NOT_MEASURED
