"""The tiers_lazy_store_bound benchmark's summary: a reading changes between the two ends of when
the lazy tier stores only when its TTFT p90 verdict (lower, higher, n.s.) does, read from the
file's intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.analysis.test_bench_summary import summarize

HEAD = "that differ between the two ends"


def cmp(rel: float, lo: float, hi: float) -> dict[str, Any]:
    m = {"rel": rel, "ci": [lo, hi], "pairs": 5}
    return {"ttft_p90": m, "e2e_p90": m}


def model(gain: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    return {
        "tier_gain": gain,
        "best_peer": "dynamo_kv",
        "ours_vs_best_peer": ours,
        "pricing_peer": "dynamo_kv",
        "ours_vs_pricing_peer": ours,
    }


def doc(free_gain: dict[str, Any]) -> dict[str, Any]:
    ours = cmp(-0.2, -0.3, -0.1)
    cell = {
        "best_hbm_only_peer": "sticky_least_loaded",
        "models": {
            "walk": model(cmp(-0.5, -0.6, -0.4), ours),
            "free": model(free_gain, ours),
        },
    }
    return {"benchmark": "tiers_lazy_store_bound", "cells": {"agentic-long_0.1/host_16": cell}}


def test_a_gain_that_loses_significance_is_a_changed_reading(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tiers_lazy_store_bound", doc(cmp(-0.1, -0.3, +0.05)))
    head = next(r for r in rows if HEAD in r.measure)
    assert head.value == "1 of 3: agentic-long_0.1/host_16 the tier's gain: lower -> n.s."
    cell = next(r for r in rows if r.measure.startswith("agentic-long_0.1/host_16"))
    assert cell.value.startswith("-50.0% [-60.0%, -40.0%] -> -10.0% [-30.0%, +5.0%] n.s.;")
    assert "(dynamo_kv -> dynamo_kv)" in cell.measure


def test_a_smaller_gain_that_stays_significant_reads_the_same(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tiers_lazy_store_bound", doc(cmp(-0.2, -0.3, -0.1)))
    head = next(r for r in rows if HEAD in r.measure)
    assert head.value == "0 of 3"
