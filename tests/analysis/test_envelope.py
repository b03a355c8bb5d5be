"""The envelope check (analysis/envelope.py) and how often a model with no error passes it."""

from __future__ import annotations

import numpy as np
import pytest

from agentic_kvc.analysis.envelope import (
    METRIC_NAMES,
    against_perfect_model,
    common_envelope,
    envelope,
    perfect_model_pass_draws,
    perfect_model_passes,
    perfect_model_total,
)


def _runs(values: list[float]) -> list[dict[str, float]]:
    return [dict.fromkeys(METRIC_NAMES, v) for v in values]


def _scattered(cv: float, k: int = 5, seed: int = 1) -> list[dict[str, float]]:
    """k repeats whose log metrics have sample standard deviation `cv` exactly, each metric's
    values in its own (seeded) order, so the metrics do not move together."""
    z = np.linspace(-1, 1, k)
    z = z / z.std(ddof=1)
    rng = np.random.default_rng(seed)
    cols = {m: rng.permutation(z) for m in METRIC_NAMES}
    return [{m: float(np.exp(cv * cols[m][i])) for m in METRIC_NAMES} for i in range(k)]


def test_inside_the_range_passes_without_a_mean_tolerance() -> None:
    reals = _runs([1.0, 1.5, 2.0])  # mean 1.5, spread 1/1.5
    m = envelope(dict.fromkeys(METRIC_NAMES, 1.9), reals, None)["ttft_p50_s"]
    assert m["inside_range"] and m["pass"] and m["within_mean_tolerance"] is None
    assert m["sim_rel_error"] == pytest.approx(0.4 / 1.5)
    assert m["real_spread_rel"] == pytest.approx(1.0 / 1.5)


def test_mean_tolerance_applies_on_top_of_the_range() -> None:
    reals = _runs([1.0, 1.5, 2.0])
    m = envelope(dict.fromkeys(METRIC_NAMES, 1.9), reals, 0.15)["e2e_p90_s"]
    assert m["inside_range"] and not m["within_mean_tolerance"] and not m["pass"]
    assert envelope(dict.fromkeys(METRIC_NAMES, 1.6), reals, 0.15)["e2e_p90_s"]["pass"]


@pytest.mark.parametrize("sim", [0.99, 2.01])
def test_outside_the_range_fails(sim: float) -> None:
    out = envelope(dict.fromkeys(METRIC_NAMES, sim), _runs([1.0, 1.5, 2.0]), None)
    assert not any(m["pass"] or m["inside_range"] for m in out.values())


def test_a_perfect_model_always_passes_repeats_that_never_scatter() -> None:
    out = perfect_model_passes(_runs([0.3] * 5), 0.15, draws=500)
    assert out["all"] == 1.0 and out["expected"] == 4.0
    assert set(out["per_metric"].values()) == {1.0}


def test_range_of_k_repeats_misses_the_mean_about_twice_one_half_to_the_k() -> None:
    # Small scatter: a nearly symmetric distribution, so the true mean lies outside the range
    # of 5 draws when all 5 fall on one side: 2 / 2**5 = 6.25% of the time.
    out = perfect_model_passes(_scattered(0.01), None, draws=40_000)
    for p in out["per_metric"].values():
        assert p == pytest.approx(1 - 2 / 2**5, abs=0.01)
    # Fewer repeats, a wider miss: 2 / 2**3 = 25%.
    three = perfect_model_passes(_scattered(0.01, k=3), None, draws=40_000)
    assert three["per_metric"]["ttft_p50_s"] == pytest.approx(0.75, abs=0.01)


def test_the_mean_tolerance_binds_only_when_the_repeats_scatter_more_than_it() -> None:
    tight = perfect_model_passes(_scattered(0.02), 0.15, draws=20_000)
    loose = perfect_model_passes(_scattered(0.5), 0.15, draws=20_000)
    assert min(tight["per_metric"].values()) > 0.92
    # A 5-repeat mean of runs scattering ~50% strays beyond 15% most of the time.
    assert max(loose["per_metric"].values()) < 0.7
    assert loose["all"] < tight["all"]


def test_metrics_that_move_together_fail_together() -> None:
    # The four metrics identical run to run (fully correlated): passing one is passing all.
    rng = np.random.default_rng(3)
    reals = _runs([float(np.exp(rng.normal(0, 0.3))) for _ in range(5)])
    ok = perfect_model_pass_draws(reals, None, draws=5000)
    assert (ok.all(axis=1) == ok.any(axis=1)).all()


def test_same_seed_same_answer_and_too_few_repeats_refused() -> None:
    reals = _scattered(0.3)
    assert perfect_model_passes(reals, 0.15, 2000, seed=4) == perfect_model_passes(
        reals, 0.15, 2000, seed=4
    )
    with pytest.raises(ValueError, match="at least 2"):
        perfect_model_passes(reals[:1], None)


def test_total_over_envelopes_adds_expectations_and_multiplies_all() -> None:
    one = (_scattered(0.3, seed=5), 0.15)
    two = (_scattered(0.3, seed=6), None)
    total = perfect_model_total([one, two], draws=20_000)
    parts = [perfect_model_passes(r, t, 20_000, seed=k) for k, (r, t) in enumerate([one, two])]
    assert total["checks"] == 8
    assert total["expected"] == pytest.approx(sum(p["expected"] for p in parts))
    assert total["all"] == pytest.approx(parts[0]["all"] * parts[1]["all"], abs=0.02)
    assert total["p05"] <= total["expected"] <= total["p95"]


def test_a_session_is_judged_against_what_a_perfect_model_reaches_in_95_percent() -> None:
    reals = _runs([0.1, 0.1, 0.1])  # no scatter: a perfect model passes every check
    metrics = envelope(dict.fromkeys(METRIC_NAMES, 0.1), reals, 0.15)
    case = {"metrics": metrics, "vllm_runs": reals, "mean_tolerance": 0.15}
    bar = against_perfect_model([case, case])
    assert bar["passed"] == 8 and bar["perfect_model"]["p05"] == 8 and bar["met"]
    off = {**case, "metrics": envelope(dict.fromkeys(METRIC_NAMES, 0.2), reals, 0.15)}
    bar = against_perfect_model([case, off])
    assert bar["passed"] == 4 and not bar["met"]
    # Scattered repeats lower the bar below every check.
    loose = {**case, "vllm_runs": _scattered(0.5), "metrics": off["metrics"]}
    assert against_perfect_model([loose])["perfect_model"]["p05"] < 4


def test_one_prediction_cannot_pass_envelopes_that_do_not_overlap() -> None:
    early, late = _runs([1.0, 1.2]), _runs([1.5, 2.0])
    apart = common_envelope([(early, None), (late, None)])
    assert not apart["ttft_p50_s"]["feasible"]
    assert (apart["ttft_p50_s"]["low"], apart["ttft_p50_s"]["high"]) == (1.5, 1.2)
    both = common_envelope([(early, None), (_runs([1.1, 1.6]), None)])
    assert both["e2e_p90_s"]["feasible"] and both["e2e_p90_s"]["low"] == 1.1
    # The mean tolerance narrows each envelope: ranges that overlap (1.15..1.2) can still
    # leave no value within 15% of both means (1.1 and 1.5).
    assert common_envelope([(early, None), (_runs([1.15, 1.85]), None)])["ttft_p50_s"]["feasible"]
    tight = common_envelope([(early, 0.15), (_runs([1.15, 1.85]), 0.15)])
    assert not tight["ttft_p50_s"]["feasible"]
