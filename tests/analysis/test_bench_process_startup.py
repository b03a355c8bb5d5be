"""The process_startup benchmark's summary: one row per target, its medians and ratio read from
the file's own numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.analysis.test_bench_summary import summarize


def doc(cached: float, uncached: float) -> dict[str, Any]:
    res = {
        "cached_median_s": cached,
        "uncached_median_s": uncached,
        "uncached_over_cached_median": uncached / cached,
        "uncached_over_cached_range": [uncached / cached * 0.9, uncached / cached * 1.1],
    }
    return {"benchmark": "process_startup", "results": {"vllm_fleet": res, "new_target": res}}


def test_each_target_gets_its_medians_and_ratio(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "process_startup", doc(40.0, 80.0))
    fleet = next(r for r in rows if r.measure.startswith("2-instance vLLM CPU fleet"))
    assert fleet.value == "40 vs 80 s (paired ratio x2, rounds x1.8-2.2)"
    assert fleet.verdict == "no goal"
    # A target the summary has no label for is still shown, under its own name.
    assert any(r.measure.startswith("new_target:") for r in rows)


def test_a_file_without_results_says_so_instead_of_failing(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "process_startup", {"benchmark": "process_startup"})
    assert rows[0].measure == "layout"
    assert "not the layout" in rows[0].value
