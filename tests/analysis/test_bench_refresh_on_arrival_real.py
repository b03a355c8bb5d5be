"""The refresh_on_arrival_real benchmark's summary applies its pre-registered rules
(docs/kv_tiers/study_followups.md, "Refreshing a waiting request's prefix on real engines"):
valid only if the refresh runs' engines, and only theirs, announce the plugin; no harm if no
router's TTFT or E2E p90 is significantly higher and the refresh runs have no request errors;
the simulator's prediction (no change) holds if no real TTFT p90, E2E p90 or hit-rate change is
significant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MEASURED, NOT_MET
from tests.analysis.test_bench_summary import comparison, summarize, verdict

METRICS = ("hit_rate", "ttft_p50", "ttft_p90", "e2e_p90")


def run(variant: str, seed: int, rep: int, plugin: int, p90: float = 1.0, errors: int = 0) -> dict:
    return {
        "backend": "vllm",
        "policy": "a",
        "seed": seed,
        "replicate": rep,
        "variant": variant,
        "engines_with_plugin": plugin,
        "errors": errors,
        "ttft_p90_s": p90,
        "load1_replay": {"mean": 2.0, "max": 3.5},
    }


def doc(*changed: dict, runs: list[dict] | None = None) -> dict[str, Any]:
    """Every measure flat on both backends for routers a and b, but the `changed` rows."""
    comps = {
        (c["backend"], c["policy"], c["metric"]): c
        for c in [comparison(b, p, m) for b in ("sim", "vllm") for p in ("a", "b") for m in METRICS]
    }
    comps |= {(c["backend"], c["policy"], c["metric"]): c for c in changed}
    if runs is None:
        runs = [
            run(v, s, 0, 2 if v == "refresh" else 0) for s in (0, 1) for v in ("plain", "refresh")
        ]
    return {
        "benchmark": "refresh_on_arrival_real",
        "parameters": {"variants": {"plain": "x", "refresh": "y"}},
        "comparisons": list(comps.values()),
        "runs": runs,
    }


def test_nothing_moves_on_valid_runs_meets_every_rule(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "refresh_on_arrival_real", doc())
    assert verdict(rows, "engines announcing the plugin") == MET
    assert verdict(rows, "does no harm") == MET
    assert verdict(rows, "prediction (no change) holds") == MET
    a = next(r for r in rows if r.measure == "a, real, refresh vs plain")
    assert a.value.startswith("ttft_p90 +0.0% [-10.0, +10.0] (simulated +0.0% [-10.0, +10.0])")
    load = next(r for r in rows if r.measure.startswith("machine load"))
    assert load.value == "2.0-2.0, 3.5"


def test_a_plain_engine_with_the_plugin_or_a_refresh_engine_without_is_invalid(
    tmp_path: Path,
) -> None:
    leaked = [run("plain", 0, 0, 1), run("refresh", 0, 0, 2)]
    rows = summarize(tmp_path, "refresh_on_arrival_real", doc(runs=leaked))
    assert verdict(rows, "engines announcing the plugin") == NOT_MET
    missing = [run("plain", 0, 0, 0), run("refresh", 0, 0, 2), run("refresh", 1, 0, 1)]
    rows = summarize(tmp_path, "refresh_on_arrival_real", doc(runs=missing))
    assert verdict(rows, "engines announcing the plugin") == NOT_MET


def test_a_real_gain_breaks_the_prediction_but_does_no_harm(tmp_path: Path) -> None:
    gain = comparison("vllm", "b", "ttft_p90", -0.3, -0.05)
    rows = summarize(tmp_path, "refresh_on_arrival_real", doc(gain))
    assert verdict(rows, "does no harm") == MET
    assert verdict(rows, "prediction (no change) holds") == NOT_MET
    moved = next(r for r in rows if "prediction (no change) holds" in r.measure)
    assert moved.value == "1 of 6; b ttft_p90 -17.5% [-30.0, -5.0]"


def test_a_real_loss_or_an_error_is_harm(tmp_path: Path) -> None:
    loss = comparison("vllm", "a", "e2e_p90", 0.02, 0.3)
    rows = summarize(tmp_path, "refresh_on_arrival_real", doc(loss))
    assert verdict(rows, "does no harm") == NOT_MET
    errs = [run("plain", 0, 0, 0), run("refresh", 0, 0, 2, errors=1)]
    rows = summarize(tmp_path, "refresh_on_arrival_real", doc(runs=errs))
    harm = next(r for r in rows if "does no harm" in r.measure)
    assert harm.verdict == NOT_MET and harm.value.endswith("/ 1")


def test_replicates_give_the_per_pair_spread(tmp_path: Path) -> None:
    runs = [
        run("plain", 0, 0, 0, 1.0),
        run("refresh", 0, 0, 2, 0.5),
        run("plain", 0, 1, 0, 1.0),
        run("refresh", 0, 1, 2, 0.8),
    ]
    rows = summarize(tmp_path, "refresh_on_arrival_real", doc(runs=runs))
    spread = next(r for r in rows if "refreshed / plain per (seed, replicate) pair" in r.measure)
    assert spread.value.startswith("median x0.65, range x0.50-x0.80; above 1 in 0 of 2 pairs")
    assert "below 1 in every replicate for seeds 0" in spread.value


def test_only_simulated_runs_are_not_measured(tmp_path: Path) -> None:
    d = doc(runs=[])
    d["comparisons"] = [c for c in d["comparisons"] if c["backend"] == "sim"]
    rows = summarize(tmp_path, "refresh_on_arrival_real", d)
    assert verdict(rows, "engines announcing the plugin") == NOT_MEASURED
    assert verdict(rows, "does no harm") == NOT_MEASURED
    assert verdict(rows, "prediction (no change) holds") == NOT_MEASURED


def test_the_confirmatory_seeds_are_read_by_the_same_rules(tmp_path: Path) -> None:
    d = doc() | {"benchmark": "refresh_on_arrival_real_seeds"}
    rows = summarize(tmp_path, "refresh_on_arrival_real_seeds", d)
    assert verdict(rows, "does no harm") == MET
