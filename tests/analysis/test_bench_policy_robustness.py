"""The policy_robustness benchmark's summary: verdicts recomputed from the paired intervals."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MET
from agentic_kvc.analysis.bench_summary.policies import ROBUST_ONLINE
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
    assert by["workloads"] == "1 of 2: b (TTFT p90)"
    assert by["largest"] == "none"


def test_a_variant_beside_its_default_form(tmp_path: Path) -> None:
    """The fitted-online variant gets its own rows (losses with their metrics, its lead) and a
    row of its paired difference from the default form, listing only significant cells."""
    level = {"ttft_p90": cmp(0.0, -0.05, 0.05), "e2e_p90": cmp(0.0, -0.05, 0.05)}
    lead = {"ttft_p90": cmp(-0.3, -0.4, -0.2), "e2e_p90": cmp(0.0, -0.05, 0.05)}
    lost = {"ttft_p90": cmp(0.08, 0.02, 0.15), "e2e_p90": cmp(0.06, 0.01, 0.11)}
    doc = {
        "benchmark": "policy_robustness",
        "ours": ["predicted_ttft", ROBUST_ONLINE],
        "scenarios": [
            {
                "scenario": "a",
                "predicted_ttft": lead,
                ROBUST_ONLINE: lead,
                "vs_default": {ROBUST_ONLINE: level},
            },
            {
                "scenario": "b",
                "predicted_ttft": level,
                ROBUST_ONLINE: lost,
                "vs_default": {
                    ROBUST_ONLINE: {
                        "ttft_p90": cmp(0.12, 0.03, 0.2),
                        "e2e_p90": cmp(0.01, -0.02, 0.04),
                    }
                },
            },
        ],
    }
    rows = summarize(tmp_path, "policy_robustness", doc)
    value = {r.measure: r.value for r in rows}
    worse = "workloads significantly worse than the best peer (TTFT or E2E p90)"
    assert value[f"predicted_ttft: {worse}"] == "0 of 2"
    assert value[f"{ROBUST_ONLINE}: {worse}"] == "1 of 2: b (TTFT p90, E2E p90)"
    assert verdict(rows, f"{ROBUST_ONLINE}: workloads") == NOT_MET
    assert (
        value[
            f"{ROBUST_ONLINE}: largest significant TTFT p90 lead, E2E p90 not significantly worse"
        ]
        == "-30.0% (a)"
    )
    (vs,) = [r for r in rows if " vs predicted_ttft (its default form)" in r.measure]
    assert vs.measure.startswith(ROBUST_ONLINE)
    assert vs.value == "1 of 2: b TTFT p90 +12.0% [+3.0, +20.0]"  # b's E2E n.s., a level


def test_a_row_that_says_not_significant_is_not_a_loss(tmp_path: Path) -> None:
    """One pair (a trace replayed once) is never significant (agentic_kvc.paired), whatever
    its request-level interval: the row's flag wins over the bounds."""
    d = doc((0.3, 0.1, 0.5), (0.0, -0.1, 0.1))
    d["scenarios"][1]["mine"]["ttft_p90"]["significant"] = False
    rows = summarize(tmp_path, "policy_robustness", d)
    assert {r.value for r in rows if "workloads significantly worse" in r.measure} == {"0 of 2"}
