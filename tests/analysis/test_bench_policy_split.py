"""The policy_split benchmark's summary: verdicts recomputed from the paired intervals."""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict

SPLIT = "predicted_ttft:split=true"


def cmp(rel: float, lo: float, hi: float) -> dict:
    return {"rel_diff": rel, "ci_low": lo, "ci_high": hi, "significant": lo > 0 or hi < 0}


def doc(vs_colo_e2e: tuple[float, float, float]) -> dict:
    """Two workloads: split ties everything on `a`; on `b` it leads the colocating version on
    TTFT p90 with the given E2E p90 interval, and ties the peer."""
    tie = {"ttft_p90": cmp(0.0, -0.05, 0.05), "e2e_p90": cmp(0.0, -0.05, 0.05)}
    lead = {"ttft_p90": cmp(-0.3, -0.4, -0.2), "e2e_p90": cmp(*vs_colo_e2e)}
    return {
        "benchmark": "policy_split",
        "scenarios": [
            {"scenario": "a", "split_vs_colo": tie, "vs_peer": {SPLIT: tie}},
            {"scenario": "b", "split_vs_colo": lead, "vs_peer": {SPLIT: tie}},
        ],
    }


def test_a_significant_e2e_loss_against_colocating_is_not_met(tmp_path: Path) -> None:
    needle = "colocate-only predicted_ttft: workloads significantly worse"
    assert verdict(summarize(tmp_path, "policy_split", doc((0.05, -0.01, 0.1))), needle) == MET
    rows = summarize(tmp_path, "policy_split", doc((0.05, 0.01, 0.1)))
    assert verdict(rows, needle) == NOT_MET
    by = {r.measure: r.value for r in rows}
    assert by[f"split vs {needle} (TTFT or E2E p90)"] == "1 of 2: b"
    assert by["split vs colocate-only predicted_ttft: significantly lower TTFT p90"] == "b -30.0%"
    assert verdict(rows, "the best peer: workloads significantly worse") == MET
    assert by["split vs the best peer: significantly lower TTFT p90"] == "none"
