"""The queued_prefix_loss summary: per cell, the share of decisions that lost prefix blocks
while queued, their regret difference with its interval, the share whose best alternative was
another instance, and the reading the script computed (worded, never recomputed here)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.test_bench_summary import summarize


def cell(verdict: str, lo: float, share: float | None) -> dict:
    return {
        "workload": "trace",
        "host_gib": 0.0,
        "decisions": 300,
        "lost_share": 0.25,
        "lost_token_share_mean": 0.1,
        "lost_best_elsewhere_share": share,
        "recoverable_regret_share_mean": 0.4,
        "diff_regret_fleet_ttft_s": {"mean": 0.03, "ci_low": lo, "ci_high": 0.05, "seeds": 11},
        "diff_regret_ttft_s": {"mean": 0.15, "ci_low": 0.1, "ci_high": 0.2, "seeds": 11},
        "verdict": verdict,
    }


def row(rows: list, words: str) -> str:
    return next(r.value for r in rows if words in r.measure)


def test_a_cell_and_its_reading(tmp_path: Path) -> None:
    rows = summarize(
        tmp_path,
        "queued_prefix_loss",
        {"benchmark": "queued_prefix_loss", "cells": [cell("b", 0.01, 0.2)]},
    )
    assert row(rows, "lost prefix blocks while queued") == "25.0% (10.0%)"
    assert row(rows, "their regret minus") == "+30.0 [+10.0, +50.0] / +150.0 [+100.0, +200.0]"
    best = row(rows, "best alternative on another instance")
    assert best.startswith("20.0% (40.0%); (b)")


def test_no_lost_decision_and_reading_c(tmp_path: Path) -> None:
    rows = summarize(
        tmp_path,
        "queued_prefix_loss",
        {"benchmark": "queued_prefix_loss", "cells": [cell("c", -0.01, None)]},
    )
    assert row(rows, "best alternative on another instance").startswith("- (40.0%); (c)")


def test_an_older_layout_says_so(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "queued_prefix_loss", {"benchmark": "queued_prefix_loss"})
    assert any("cells" in r.value for r in rows)
