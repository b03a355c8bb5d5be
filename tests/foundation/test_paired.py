"""Paired statistics: values, the interval's coverage on synthetic data with a known difference."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from agentic_kvc.paired import (
    REQUEST_SCHEMA,
    fmt_diff,
    paired_compare,
    paired_table,
    request_frame,
)


def _frame(rows: list[dict]) -> pl.DataFrame:
    base = {
        "error": None,
        "tpot_s": 0.01,
        "e2e_s": 1.0,
        "input_tokens": 100,
        "cached_tokens": 0,
        "prefill_instance": 0,
        "instances": 2,
    }
    return pl.DataFrame([{**base, **r} for r in rows])


def _synthetic(
    rng: np.random.Generator, ratio: float, seeds: int = 5, n: int = 200, rho: float = 0.8
) -> pl.DataFrame:
    """Two variants whose latency distributions differ by exactly `ratio` (every quantile).

    A seed scales both variants alike (a heavy workload is slow for everyone); within a seed the
    candidate's draw is correlated with the baseline's for the same request (pairing), but its
    marginal distribution is the baseline's times `ratio`, so the true p90 ratio is `ratio`.
    """
    rows = []
    for s in range(seeds):
        scale = float(np.exp(0.4 * rng.standard_normal()))
        z = rng.standard_normal(n)
        z2 = rho * z + np.sqrt(1 - rho**2) * rng.standard_normal(n)
        for i in range(n):
            rid = f"r{i:04d}"
            rows.append(
                {"variant": "a", "seed": s, "request_id": rid, "ttft_s": scale * np.exp(z[i])}
            )
            rows.append(
                {
                    "variant": "b",
                    "seed": s,
                    "request_id": rid,
                    "ttft_s": ratio * scale * np.exp(z2[i]),
                }
            )
    return _frame(rows)


def test_interval_covers_the_known_difference_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    trials, covered = 80, 0
    for t in range(trials):
        df = _synthetic(rng, ratio=1.2)
        r = paired_compare(df, "a", "b", "ttft_p90", n_boot=300, rng_seed=t)
        covered += r.ci_low <= 0.2 <= r.ci_high
    # 95% nominal; with 80 trials a correct interval lands in [0.86, 1.0] with high probability,
    # one that ignored the request level (far too narrow) or doubled it would not.
    assert 0.86 <= covered / trials <= 1.0


def test_no_difference_is_mostly_not_significant_and_a_large_one_is() -> None:
    rng = np.random.default_rng(3)
    null_sig = sum(
        paired_compare(
            _synthetic(rng, 1.0), "a", "b", "ttft_p50", n_boot=300, rng_seed=t
        ).significant
        for t in range(40)
    )
    assert null_sig <= 6  # ~5% expected
    big = paired_compare(_synthetic(rng, 1.5), "a", "b", "ttft_p50", n_boot=300)
    assert big.significant and big.verdict == "higher"
    assert big.ci_low > 0.3


def test_pairing_narrows_the_interval_when_seeds_differ_a_lot() -> None:
    """Shuffling which baseline seed pairs with which candidate seed breaks the pairing: the
    seed-to-seed spread then enters the difference and the interval widens."""
    rng = np.random.default_rng(11)
    df = _synthetic(rng, 1.1, seeds=6, rho=0.95)
    paired = paired_compare(df, "a", "b", "ttft_p90", n_boot=400)
    perm = {0: 3, 1: 4, 2: 5, 3: 0, 4: 1, 5: 2}
    broken = df.with_columns(
        pl.when(pl.col("variant") == "b")
        .then(pl.col("seed").replace_strict(perm))
        .otherwise(pl.col("seed"))
        .alias("seed")
    )
    unpaired = paired_compare(broken, "a", "b", "ttft_p90", n_boot=400)
    assert (paired.ci_high - paired.ci_low) < 0.7 * (unpaired.ci_high - unpaired.ci_low)


def test_values_are_the_pooled_statistics() -> None:
    rows = []
    for s in (0, 1):
        for i in range(4):
            rows.append(
                {
                    "variant": "a",
                    "seed": s,
                    "request_id": f"r{i}",
                    "ttft_s": float(i + 1),
                    "cached_tokens": 50,
                    "prefill_instance": i % 2,
                }
            )
            rows.append(
                {
                    "variant": "b",
                    "seed": s,
                    "request_id": f"r{i}",
                    "ttft_s": 2.0 * (i + 1),
                    "cached_tokens": 25,
                    "prefill_instance": 0,
                }
            )
    df = _frame(rows)
    p50 = paired_compare(df, "a", "b", "ttft_p50", n_boot=50)
    assert p50.baseline_value == pytest.approx(2.5)
    assert p50.rel_diff == pytest.approx(1.0)
    hit = paired_compare(df, "a", "b", "hit_rate", n_boot=50)
    assert (hit.baseline_value, hit.candidate_value) == (pytest.approx(0.5), pytest.approx(0.25))
    imb = paired_compare(df, "a", "b", "token_max_over_min", n_boot=50)
    assert imb.baseline_value == pytest.approx(1.0)  # both instances did the same work
    assert np.isnan(imb.candidate_value)  # instance 1 idle: max/min undefined
    # so is the difference: no interval, no finding (it used to read as significant)
    assert np.isnan(imb.ci_low) and not imb.significant and imb.verdict == "n.s."
    assert p50.n_pairs == 2 and p50.n_requests == 8


def test_errors_are_left_out_of_latencies() -> None:
    rows = [
        {"variant": v, "seed": 0, "request_id": f"r{i}", "ttft_s": 1.0 + i}
        for v in ("a", "b")
        for i in range(5)
    ]
    rows.append({"variant": "b", "seed": 0, "request_id": "r9", "ttft_s": 1000.0, "error": "boom"})
    r = paired_compare(_frame(rows), "a", "b", "ttft_p99", n_boot=50)
    assert r.candidate_value == pytest.approx(r.baseline_value)


def test_variants_without_a_common_seed_are_an_error() -> None:
    df = _frame(
        [
            {"variant": "a", "seed": 0, "request_id": "r0", "ttft_s": 1.0},
            {"variant": "b", "seed": 1, "request_id": "r0", "ttft_s": 1.0},
        ]
    )
    with pytest.raises(ValueError, match="no seed value has runs of both"):
        paired_compare(df, "a", "b")
    with pytest.raises(ValueError, match="unknown metric"):
        paired_compare(df, "a", "b", "ttft_p42")


def test_table_and_format() -> None:
    df = _synthetic(np.random.default_rng(1), 1.0, seeds=3, n=50)
    t = paired_table(df, "a", ["a", "b"], ["ttft_p50", "ttft_p90"], n_boot=100)
    assert t.height == 2 and set(t["metric"]) == {"ttft_p50", "ttft_p90"}
    text = fmt_diff(t.row(0, named=True))
    assert text.startswith(("+", "-")) and "[" in text


def test_one_replicate_is_never_significant_and_prints_no_interval() -> None:
    """One seed: the bootstrap can only resample that run's requests, so even a large
    difference is no finding over seeds; the text says why instead of an interval."""
    one = paired_compare(_synthetic(np.random.default_rng(5), 1.5, seeds=1), "a", "b", n_boot=200)
    assert one.n_pairs == 1 and one.rel_diff > 0.3
    assert one.ci_low > 0  # the one run's request-level interval would exclude 0
    assert not one.significant and one.verdict == "n.s."
    assert fmt_diff(one) == f"+{100 * one.rel_diff:.1f}% (one replicate: no interval)"
    two = paired_compare(_synthetic(np.random.default_rng(5), 1.5, seeds=2), "a", "b", n_boot=200)
    assert two.significant and "[" in fmt_diff(two)


def test_fast_quantile_is_numpys_to_the_last_bit():
    # The bootstrap's quantile replaces np.quantile for speed; reports must not move by an ulp.
    from agentic_kvc.paired import _quantile

    rng = np.random.default_rng(7)
    for i in range(2000):
        n = int(rng.integers(1, 200))
        v = rng.lognormal(0, 2, n)
        if i % 2:
            v = np.round(v, 1)  # ties
        v[rng.random(n) < 0.1] = np.nan
        kept = v[~np.isnan(v)]
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            want = float(np.quantile(kept, q)) if kept.size else float("nan")
            got = _quantile(v, q)
            assert got == want or (np.isnan(got) and np.isnan(want)), (i, q, got, want)


def test_request_frame_keeps_the_paired_fields_typed_and_nulls_what_a_record_lacks() -> None:
    recs = [
        {"request_id": "a", "ttft_s": 1, "input_tokens": 8, "prefill_instance": 0, "extra": 5},
        {"request_id": "b", "error": "timeout"},
    ]
    df = request_frame(recs)
    assert df.columns == list(REQUEST_SCHEMA)  # no field outside the schema, in its order
    assert dict(df.schema) == REQUEST_SCHEMA
    assert df.get_column("ttft_s").to_list() == [1.0, None]
    assert df.get_column("error").to_list() == [None, "timeout"]
