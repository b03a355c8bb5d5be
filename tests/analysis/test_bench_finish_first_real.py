"""The finish_first_real benchmark's summary applies its two pre-registered rules
(docs/kv_tiers/pause_aware.md, "On real vLLM engines"): the real hit-rate change has the
simulated one's sign for every router; on the real engines TTFT p90 is significantly lower
somewhere and TTFT or E2E p90 significantly higher nowhere."""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MEASURED, NOT_MET
from tests.analysis.test_bench_summary import comparison, summarize, verdict


def doc(*comps: dict, loads: tuple[float, ...] = (1.2, 2.5)) -> dict:
    runs = [{"backend": "vllm", "load1_replay": {"mean": x, "max": x + 1}} for x in loads]
    return {"benchmark": "finish_first_real", "comparisons": list(comps), "runs": runs}


SIM_UP = [comparison("sim", p, "hit_rate", 0.05, 0.3, rel=0.16) for p in ("a", "b")]
REAL_UP = [comparison("vllm", p, "hit_rate", -0.02, 0.2, rel=0.1) for p in ("a", "b")]
FLAT = [
    comparison("vllm", p, m, -0.1, 0.1, rel=0.02)
    for p in ("a", "b")
    for m in ("ttft_p90", "e2e_p90")
]


def test_the_same_sign_on_both_backends_meets_the_direction_rule(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "finish_first_real", doc(*SIM_UP, *REAL_UP, *FLAT))
    assert verdict(rows, "simulated one's sign") == MET
    direction = next(r for r in rows if "simulated one's sign" in r.measure)
    assert "a: simulated +16.0% [+5.0, +30.0], real +10.0% [-2.0, +20.0]" in direction.value
    # No latency gain: the second rule's first half is not met, its second half is.
    assert verdict(rows, "TTFT p90 significantly lower in") == NOT_MET
    assert verdict(rows, "significantly higher in") == MET
    load = next(r for r in rows if r.measure.startswith("machine load"))
    assert load.value == "1.2-2.5, 3.5"


def test_a_real_change_of_the_other_sign_fails_the_direction_rule(tmp_path: Path) -> None:
    down = comparison("vllm", "b", "hit_rate", -0.2, 0.1, rel=-0.05)
    rows = summarize(tmp_path, "finish_first_real", doc(*SIM_UP, REAL_UP[0], down, *FLAT))
    assert verdict(rows, "simulated one's sign") == NOT_MET


def test_a_real_gain_and_a_real_loss(tmp_path: Path) -> None:
    gain = comparison("vllm", "a", "ttft_p90", -0.3, -0.05, rel=-0.2)
    loss = comparison("vllm", "b", "e2e_p90", 0.02, 0.3, rel=0.15)
    rows = summarize(tmp_path, "finish_first_real", doc(*SIM_UP, *REAL_UP, gain, loss))
    assert verdict(rows, "TTFT p90 significantly lower in") == MET
    assert verdict(rows, "significantly higher in") == NOT_MET
    higher = next(r for r in rows if "significantly higher in" in r.measure)
    assert higher.value.startswith("1 of 2") and "b e2e_p90 +15.0%" in higher.value


def test_only_simulated_runs_are_not_measured(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "finish_first_real", doc(*SIM_UP, loads=()))
    assert verdict(rows, "simulated one's sign") == NOT_MEASURED
    assert verdict(rows, "TTFT p90 significantly lower in") == NOT_MEASURED


def test_replicates_show_the_per_pair_spread(tmp_path: Path) -> None:
    # Seed 1: up in both replicates; seed 2: down in both; seed 3: one each way.
    p90 = {(1, 0): (1.0, 1.5), (1, 1): (1.0, 1.2), (2, 0): (2.0, 1.0), (2, 1): (1.0, 0.5)}
    p90 |= {(3, 0): (1.0, 2.0), (3, 1): (2.0, 1.0)}
    runs = [
        {
            "backend": "vllm",
            "policy": "a",
            "seed": seed,
            "replicate": rep,
            "variant": variant,
            "ttft_p90_s": value,
            "load1_replay": {"mean": 1.0, "max": 2.0},
        }
        for (seed, rep), pair in p90.items()
        for variant, value in zip(("lru", "finish_first"), pair, strict=True)
    ]
    d = doc(*SIM_UP, *REAL_UP, *FLAT) | {"runs": runs, "benchmark": "finish_first_real_replicates"}
    rows = summarize(tmp_path, "finish_first_real_replicates", d)
    spread = next(r for r in rows if "per (seed, replicate) pair" in r.measure)
    assert spread.value == (
        "median x0.85, range x0.50-x2.00; above 1 in 3 of 6 pairs; above 1 in every replicate "
        "for seeds 1, below 1 in every replicate for seeds 2 (of 3 seeds)"
    )


def test_one_replicate_adds_no_spread_row(tmp_path: Path) -> None:
    runs = [
        {"backend": "vllm", "policy": "a", "seed": 1, "replicate": 0, "variant": v}
        | {"ttft_p90_s": 1.0, "load1_replay": {"mean": 1.0, "max": 2.0}}
        for v in ("lru", "finish_first")
    ]
    rows = summarize(tmp_path, "finish_first_real", doc(*SIM_UP, *REAL_UP, *FLAT) | {"runs": runs})
    assert not [r for r in rows if "per (seed, replicate) pair" in r.measure]


def test_a_single_replicate_run_says_so(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "finish_first_real", doc(*SIM_UP, *REAL_UP, *FLAT))
    assert any(r.measure == "real runs per seed and variant" for r in rows)
    rows = summarize(tmp_path, "finish_first_real", doc(*SIM_UP, loads=()))
    assert not any(r.measure == "real runs per seed and variant" for r in rows)
