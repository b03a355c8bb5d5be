"""The policy_robustness benchmark's summary: verdicts recomputed from the paired intervals."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.analysis.bench_summary import MET, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict


def cmp(rel: float, lo: float, hi: float) -> dict:
    return {"rel_diff": rel, "ci_low": lo, "ci_high": hi, "significant": lo > 0 or hi < 0}


def doc(ttft: tuple[float, float, float], e2e: tuple[float, float, float]) -> dict:
    """Two workloads: one level with the peer, one where ours has the given intervals."""
    level = {"ttft_p90": cmp(0.0, -0.05, 0.05), "e2e_p90": cmp(0.0, -0.05, 0.05)}
    return {
        "benchmark": "policy_robustness",
        "ours": ["mine"],
        "scenarios": [
            {"scenario": "a", "mine": level},
            {"scenario": "b", "mine": {"ttft_p90": cmp(*ttft), "e2e_p90": cmp(*e2e)}},
        ],
    }


@pytest.mark.parametrize(
    ("inside", "outside", "needle"),
    [
        # significantly worse: the E2E interval's low end crosses 0
        (
            ((-0.1, -0.2, -0.01), (0.05, -0.001, 0.1)),
            ((-0.1, -0.2, -0.01), (0.05, 0.001, 0.1)),
            "workloads significantly worse",
        ),
        # the 20% lead: only at E2E not significantly worse
        (
            ((-0.2, -0.3, -0.1), (0.0, -0.1, 0.1)),
            ((-0.19, -0.3, -0.1), (0.0, -0.1, 0.1)),
            "largest significant",
        ),
        (
            ((-0.3, -0.4, -0.2), (0.05, -0.01, 0.1)),
            ((-0.3, -0.4, -0.2), (0.05, 0.01, 0.1)),
            "largest significant",
        ),
    ],
)
def test_verdicts_flip_at_the_goal(
    tmp_path: Path, inside: tuple, outside: tuple, needle: str
) -> None:
    assert verdict(summarize(tmp_path, "policy_robustness", doc(*inside)), needle) == MET
    assert verdict(summarize(tmp_path, "policy_robustness", doc(*outside)), needle) == NOT_MET


def test_names_the_workloads_it_loses_and_the_lead(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "policy_robustness", doc((0.3, 0.1, 0.5), (0.0, -0.1, 0.1)))
    by = {r.measure.split(": ", 1)[1].split(" ")[0]: r.value for r in rows}
    assert by["workloads"] == "1 of 2: b"
    assert by["largest"] == "none"
