"""The generated wording of differences: identical variants, untouched statistics, no signed
zero bound, and a design expectation faced with its outcome and the row that explains it."""

from __future__ import annotations

import polars as pl
import pytest

from agentic_kvc.analysis.studies.base import Expectation, Section, direction
from agentic_kvc.analysis.studies.elastic_load import faced, never_cell
from agentic_kvc.paired import PairedResult, fmt_diff, paired_compare, signed


def _frame(cand_ttft: list[float], base_ttft: list[float], cand_inst: int = 0) -> pl.DataFrame:
    """Two variants over 2 seeds, the same request ids; `cand_inst` moves the candidate's first
    request to another instance."""
    rows = []
    for seed in (0, 1):
        for i, (b, c) in enumerate(zip(base_ttft, cand_ttft, strict=True)):
            common = {
                "seed": seed,
                "request_id": f"r{i:03d}",
                "error": None,
                "tpot_s": 0.01,
                "e2e_s": 1.0,
                "input_tokens": 100,
                "cached_tokens": 0,
                "instances": 2,
            }
            rows.append({**common, "variant": "base", "ttft_s": b, "prefill_instance": 0})
            inst = cand_inst if i == 0 else 0
            rows.append({**common, "variant": "cand", "ttft_s": c, "prefill_instance": inst})
    return pl.DataFrame(rows)


BASE = [float(x) for x in range(1, 41)]


def _result(lo: float, hi: float, rel: float, n_differ: int = 5) -> PairedResult:
    return PairedResult("ttft_p90", "a", "b", 1.0, 1.0 + rel, rel, lo, hi, 5, 100, n_differ)


@pytest.mark.parametrize(
    ("x", "digits", "want"),
    [
        (-0.002, 0, "-0.002"),
        (-0.2, 0, "-0.2"),
        (-13.1, 0, "-13"),
        (0.04, 1, "+0.04"),
        (0.0, 1, "0.0"),
        (0.0, 0, "0"),
        (12.34, 1, "+12.3"),
        (-1e-9, 1, "0.0"),  # below every extra decimal: an unsigned zero, never "-0.0"
    ],
)
def test_signed_never_prints_a_signed_zero(x: float, digits: int, want: str) -> None:
    assert signed(x, digits) == want


def test_interval_bound_that_rounds_to_zero_keeps_its_sign_and_digits() -> None:
    r = _result(-0.131, -0.002, -0.067)
    text = direction(r, "TTFT p90")
    assert text == "lowers TTFT p90 by 7% [-13, -0.2]"
    assert "-0]" not in text and "+0]" not in text
    assert fmt_diff(_result(-0.131, -0.0004, -0.067)) == "-6.7% [-13.1, -0.04]"


def test_identical_variants_are_reported_as_identical_with_the_count() -> None:
    df = _frame(BASE, BASE)
    r = paired_compare(df, "base", "cand", "ttft_p90", n_boot=50)
    assert r.identical and r.n_differ == 0 and not r.significant and r.verdict == "identical"
    assert fmt_diff(r) == (
        "identical: the mechanism never acted (0 of 80 paired requests placed or timed differently)"
    )
    assert "[" not in fmt_diff(r)
    assert direction(r, "TTFT p90").startswith("leaves TTFT p90 unchanged, identical:")


def test_one_moved_request_is_not_identical() -> None:
    # Same latencies, but the candidate placed request 0 elsewhere: the mechanism acted.
    r = paired_compare(_frame(BASE, BASE, cand_inst=1), "base", "cand", "ttft_p90", n_boot=50)
    assert not r.identical and r.n_differ == 2  # request 0 in each of the 2 seeds
    # Every resample's p90 is unchanged: worded as such, with the count, not "[0.0, 0.0]".
    assert fmt_diff(r) == "unchanged: 2 of 80 paired requests differ, none moves the p90"


def test_a_real_difference_keeps_the_interval_form() -> None:
    cand = [b * 1.5 for b in BASE]
    r = paired_compare(_frame(cand, BASE), "base", "cand", "ttft_p90", n_boot=100)
    assert r.n_differ == 80 and r.significant
    assert fmt_diff(r).startswith("+50.0% [")
    assert direction(r, "TTFT p90").startswith("raises TTFT p90 by 50% [")


def test_expectation_block_states_expectation_outcome_and_row() -> None:
    e = Expectation(
        "most offloaded at low load",
        "seeds/000, 2.4",
        "0.3% offloaded at the lowest load.",
        False,
        ("load", "offloaded"),
        (("0.125", "0.3%"),),
        "the instance was idle.",
    )
    s = Section("x", "X", "Q?")
    s.expect(e)
    md = s.markdown()
    assert "**Design expectation** (seeds/000, 2.4): most offloaded at low load" in md
    assert "The expectation does not hold." in md
    assert "| 0.125 | 0.3% |" in md and "**Why**: the instance was idle." in md
    assert e.to_json()["holds"] is False


def _shares(offloaded: list[float], reasons: list[tuple[float, float, float]]) -> pl.DataFrame:
    loads = [0.125, 0.5, 1.0, 2.0][: len(offloaded)]
    return pl.DataFrame(
        {
            "variant": ["elastic"] * len(loads),
            "session_rate_per_s": loads,
            "heavy": [300] * len(loads),
            "offloaded": offloaded,
            "p_idle_d_busy": [r[0] for r in reasons],
            "p_overloaded": [r[1] for r in reasons],
            "d_idle": [r[2] for r in reasons],
        }
    )


def _lat(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "variant": ["elastic"] * n,
            "session_rate_per_s": [0.125, 0.5, 1.0, 2.0][:n],
            "ttft_s_p90": [5.0] * n,
        }
    )


def test_elastic_expectation_names_the_row_and_reason_that_break_it() -> None:
    shares = _shares(
        [0.003, 0.02, 0.05, 0.23],
        [(0.003, 0.0, 0.997), (0.02, 0.14, 0.84), (0.05, 0.7, 0.25), (0.23, 0.72, 0.05)],
    )
    e = faced(shares, _lat(4))
    assert e is not None and not e.holds
    assert "0.3% of HEAVY requests at the lowest load" in e.outcome
    assert e.rows[0][0] == "0.125" and e.rows[0][-2] == "99.7%"  # d_idle, the deciding reason
    assert "99.7% of elastic's HEAVY requests found that the session's instance was not" in e.why


def test_elastic_expectation_holds_when_the_shares_follow_the_design() -> None:
    shares = _shares(
        [0.8, 0.5, 0.3, 0.05],
        [(0.8, 0.1, 0.1), (0.5, 0.3, 0.2), (0.3, 0.6, 0.1), (0.05, 0.9, 0.05)],
    )
    e = faced(shares, _lat(4))
    assert e is not None and e.holds


def test_never_cell_adds_elastics_own_counter_when_nothing_moved() -> None:
    shares = _shares([0.0, 0.1, 0.2], [(0.0, 0.0, 1.0), (0.1, 0.0, 0.9), (0.2, 0.0, 0.8)])
    same = _result(0.0, 0.0, 0.0, n_differ=0)
    assert never_cell(shares, 0.125, same).endswith("(elastic offloaded 0 of 300 HEAVY requests)")
    moved = _result(-0.1, -0.02, -0.05)
    assert never_cell(shares, 0.5, moved) == fmt_diff(moved)
