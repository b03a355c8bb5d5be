"""benchmarks/sim_vs_vllm.py's envelope check (pure logic; the benchmark itself needs vLLM)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType

import pytest

from agentic_kvc.analysis.envelope import METRIC_NAMES, envelope
from agentic_kvc.bench_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("sim_vs_vllm")


def test_repeats_are_distinct_runs_of_one_config(bench: ModuleType) -> None:
    ids = {bench.config_for(1, "vllm", 11, k).run_id() for k in range(5)}
    assert len(ids) == 5
    base = bench.config_for(1, "vllm", 11, 0)
    assert base.run_id() == bench.serving_config(1, "vllm", 11).run_id()
    twin = bench.config_for(1, "sim", 11).canonical()
    again = bench.config_for(1, "vllm", 11, 3).canonical()
    assert {k: v for k, v in again.items() if k not in ("backend", "repeat")} == {
        k: v for k, v in twin.items() if k != "backend"
    }


def test_table_has_one_row_per_case_and_metric(bench: ModuleType) -> None:
    reals = [dict.fromkeys(METRIC_NAMES, v) for v in (0.1, 0.2)]
    case = {
        "instances": 2,
        "metrics": envelope(dict.fromkeys(METRIC_NAMES, 0.25), reals, None),
        "vllm_runs": [
            {"host_load": {"load1_mean": 1.5, "others_runnable": 0.25}, **reals[0]},
            {"host_load": None, **reals[1]},
        ],
        "sim": {"background_threads": 0.25},
    }
    rows = bench.table([case], {"2": [3.25]}).splitlines()
    assert len(rows) == 2 + len(METRIC_NAMES) + 2 + 4
    # The last column is a perfect model's pass rate, computed from the runs (none stored).
    assert rows[2].startswith(
        "| 2 | TTFT p50 | 150 ms | 100..200 ms | 66.7% | 250 ms | +66.7% | no | no | "
    )
    assert rows[2].endswith("% |")
    assert rows[7].startswith("In the envelope: the simulator 0 of 4; a model with no error ")
    # Two repeats whose four metrics move together: a model with no error misses all four in
    # about half the sessions, so the 95% bar is 0 checks and even 0 meets it.
    assert "at least 0 in 95% of sessions" in rows[7] and rows[7].endswith(": met.")
    assert rows[-1] == "| 2 | 1.50, ? | 0.25, ? | 0.25 | 3.25 |"
    assert bench.table([case]).splitlines()[-1] == "| 2 | 1.50, ? | 0.25, ? | 0.25 | - |"


def test_neighbour_levels_rotate_by_round_and_calibrate_in_the_first_rounds() -> None:
    mod = load_benchmark("sim_vs_vllm_neighbours")
    steps = mod.plan([0, 1, 2], [1, 2], rounds=3, calibration_rounds=1)
    firsts = [next(lvl for k, lvl, _, _ in steps if k == r) for r in range(3)]
    assert firsts == [0, 1, 2]  # no level always runs first
    checks = [(lvl, n) for _, lvl, n, role in steps if role == "check"]
    assert sorted(checks) == sorted((lvl, n) for lvl in (0, 1, 2) for n in (1, 2) for _ in range(3))
    cal = [(k, lvl, n) for k, lvl, n, role in steps if role == "calibration"]
    assert len(cal) == 6 and {k for k, _, _ in cal} == {0}
    # Each calibration replay runs right before the check run of its level and size.
    for i, (k, lvl, n, role) in enumerate(steps):
        if role == "calibration":
            assert steps[i + 1] == (k, lvl, n, "check")


def test_interleaved_order_alternates_calibration_and_check_per_round(bench: ModuleType) -> None:
    plan = bench.interleaved_plan([1, 2], 2, [1, 2])
    assert plan == [
        ("calibration", 1, 0),
        ("check", 1, 0),
        ("calibration", 2, 0),
        ("check", 2, 0),
        ("calibration", 1, 1),
        ("check", 1, 1),
        ("calibration", 2, 1),
        ("check", 2, 1),
    ]
    # A size only checked (or only calibrated) gets only that role.
    assert bench.interleaved_plan([1], 1, [1, 2]) == [
        ("calibration", 1, 0),
        ("check", 1, 0),
        ("calibration", 2, 0),
    ]


def test_the_fit_sees_only_the_calibration_replays(bench: ModuleType, tmp_path: Path) -> None:
    ran: list[tuple[str, int, int, int]] = []

    def run(cfg, role):  # a fake engine: a run directory with a manifest's host load
        ran.append((role, cfg.fleet.instances, cfg.repeat, cfg.seed))
        run_dir = tmp_path / f"{role}-{cfg.run_id()}"
        run_dir.mkdir()
        load = {"replay": {"load1": {"mean": float(len(ran))}}}
        (run_dir / "manifest.json").write_text(json.dumps({"backend_info": {"host_load": load}}))
        return run_dir

    seen: list[Path] = []
    out = bench.calibrate_interleaved(
        [1, 2], 3, [1, 2], 11, run, lambda dirs: seen.extend(dirs) or {"fitted": len(dirs)}
    )
    assert [(r, n, k) for r, n, k, _ in ran] == bench.interleaved_plan([1, 2], 3, [1, 2])
    assert {s for r, *_, s in ran if r == "calibration"} == {bench.SERVING_SEED}
    assert {s for r, *_, s in ran if r == "check"} == {11}
    assert out["fit"] == {"fitted": 6}
    assert all(d.name.startswith("calibration-") for d in seen) and len(seen) == 6
    assert [r["run_dir"] for r in out["order"] if r["role"] == "calibration"] == list(
        map(str, seen)
    )
    # Each run's load, by role and size, in run order (the fake's loads are 1, 2, ...).
    assert out["load1_mean"] == {
        "calibration": {"1": [1.0, 5.0, 9.0], "2": [3.0, 7.0, 11.0]},
        "check": {"1": [2.0, 6.0, 10.0], "2": [4.0, 8.0, 12.0]},
    }


def _session(path: Path, seed: int, one: list[float], two: list[float]) -> Path:
    """A minimal benchmark output: real repeats per fleet size (every metric alike)."""
    cases = []
    for n, values, tol in ((1, one, 0.15), (2, two, None)):
        runs = [
            {m: v for m in ("ttft_p50_s", "ttft_p90_s", "e2e_p50_s", "e2e_p90_s")} for v in values
        ]
        metrics = {m: {"pass": True, "inside_range": True} for m in runs[0]}
        cases.append({"instances": n, "vllm_runs": runs, "mean_tolerance": tol, "metrics": metrics})
    doc = {"benchmark": "sim_vs_vllm", "config": {"seed": seed}, "started_at": "t", "cases": cases}
    path.write_text(json.dumps(doc))
    return path


def test_sessions_baseline_judges_one_hours_mean_by_anothers_envelope(tmp_path: Path) -> None:
    mod = load_benchmark("sim_vs_vllm_sessions")
    a = _session(tmp_path / "a.json", 11, [1.0, 1.2], [2.0, 4.0])  # means 1.1 and 3.0
    b = _session(tmp_path / "b.json", 11, [1.2, 1.4], [2.5, 3.5])  # means 1.3 and 3.0
    other_seed = _session(tmp_path / "c.json", 13, [9.0, 9.0], [9.0, 9.0])
    result = mod.cross_session([mod.load_session(p) for p in (a, b, other_seed)])
    by = {
        (Path(p["predictor"]).name, p["instances"]): p["metrics"]["ttft_p50_s"]
        for p in result["pairs"]
    }
    assert set(by) == {("a.json", 1), ("a.json", 2), ("b.json", 1), ("b.json", 2)}  # seed 13 alone
    # a's 1-instance mean 1.1 is below b's range 1.2..1.4, b's 1.3 above a's 1.0..1.2.
    assert not by[("a.json", 1)]["inside_range"] and not by[("b.json", 1)]["inside_range"]
    # 2 instances, no mean tolerance: 3.0 lies inside both ranges.
    assert by[("a.json", 2)]["pass"] and by[("b.json", 2)]["pass"]
    assert by[("a.json", 1)]["error"] == pytest.approx(1.1 / 1.3 - 1)
    assert result["real_checks"] == 16 and result["real_passes"] == 8


def test_offline_compare_pairs_the_same_checks_of_two_model_versions() -> None:
    mod = load_benchmark("sim_vs_vllm_offline")

    def doc(sims: dict[str, float]) -> dict:
        # Two sessions, 2 instances, pooled fit; real mean 1.0 on every metric.
        return {
            "results": [
                {
                    "fit": "pooled",
                    "session": s,
                    "cases": {"2": {m: {"sim": v, "real_mean": 1.0} for m, v in sims.items()}},
                }
                for s in ("a", "b")
            ]
        }

    before = doc({"ttft_p50_s": 2.0, "e2e_p90_s": 1.5})  # over-predicts
    after = doc({"ttft_p50_s": 1.0, "e2e_p90_s": 1.5})  # one metric now exact
    (row,) = mod.compare(before, after)
    assert (row["fit"], row["instances"], row["checks"]) == ("pooled", 2, 4)
    assert (row["better"], row["worse"]) == (2, 0)
    mean, lo, hi = row["abs_error_change"]
    assert mean == pytest.approx(-math.log(2.0) / 2) and lo <= mean <= hi <= 0
    assert row["bias_after"][0] == pytest.approx(math.log(1.5) / 2)
