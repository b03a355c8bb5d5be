"""The refresh_on_arrival summary recomputes the pre-registered rule from the paired rows:
TTFT p90 significantly lower somewhere and TTFT / E2E p90 significantly higher nowhere."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.test_bench_summary import summarize


def comp(metric: str, rel: float, lo: float, hi: float, policy: str = "p") -> dict:
    return {
        "workload": "w",
        "host_gib": 0.0,
        "policy": policy,
        "metric": metric,
        "rel_diff": rel,
        "ci_low": lo,
        "ci_high": hi,
        "significant": lo > 0 or hi < 0,
    }


def rows_of(tmp_path: Path, comps: list[dict]) -> dict:
    doc = {"benchmark": "refresh_on_arrival", "comparisons": comps}
    return {r.measure: r for r in summarize(tmp_path, "refresh_on_arrival", doc)}


def test_it_helps_when_lower_somewhere_and_higher_nowhere(tmp_path: Path) -> None:
    rows = rows_of(
        tmp_path,
        [
            comp("ttft_p90", -0.1, -0.2, -0.05),
            comp("e2e_p90", 0.01, -0.02, 0.03),
            comp("hit_rate", 0.05, 0.01, 0.09),
            comp("ttft_p90", 0.02, -0.01, 0.05, policy="q"),
        ],
    )
    rule = next(r for m, r in rows.items() if m.startswith("the pre-registered rule"))
    assert (rule.value, rule.verdict) == ("yes", "met")
    lower = next(r for m, r in rows.items() if m.startswith("TTFT p90 significantly lower"))
    assert lower.value.startswith("1 of 2; w, host 0 GiB, p -10.0% [-20.0, -5.0]")
    assert next(r for m, r in rows.items() if m.startswith("HBM hit")).value == "1 / 0 of 1"


def test_an_e2e_cost_anywhere_fails_the_rule(tmp_path: Path) -> None:
    rows = rows_of(
        tmp_path,
        [comp("ttft_p90", -0.1, -0.2, -0.05), comp("e2e_p90", 0.04, 0.01, 0.07, policy="q")],
    )
    rule = next(r for m, r in rows.items() if m.startswith("the pre-registered rule"))
    assert (rule.value, rule.verdict) == ("no", "not met")
    higher = next(r for m, r in rows.items() if m.startswith("TTFT or E2E p90 significantly"))
    assert higher.value.startswith("1 of 2; w, host 0 GiB, q e2e_p90 +4.0% [+1.0, +7.0]")
