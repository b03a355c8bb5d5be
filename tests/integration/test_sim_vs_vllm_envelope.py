"""benchmarks/sim_vs_vllm.py's envelope check (pure logic; the benchmark itself needs vLLM)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_vs_vllm.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sim_vs_vllm", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runs(bench: ModuleType, values: list[float]) -> list[dict[str, float]]:
    return [dict.fromkeys(bench.METRIC_NAMES, v) for v in values]


def test_inside_the_range_passes_without_a_mean_tolerance(bench: ModuleType) -> None:
    reals = _runs(bench, [1.0, 1.5, 2.0])  # mean 1.5, spread 1/1.5
    out = bench.envelope(dict.fromkeys(bench.METRIC_NAMES, 1.9), reals, None)
    m = out["ttft_p50_s"]
    assert m["inside_range"] and m["pass"] and m["within_mean_tolerance"] is None
    assert m["sim_rel_error"] == pytest.approx(0.4 / 1.5)
    assert m["real_spread_rel"] == pytest.approx(1.0 / 1.5)


def test_mean_tolerance_applies_on_top_of_the_range(bench: ModuleType) -> None:
    reals = _runs(bench, [1.0, 1.5, 2.0])
    out = bench.envelope(dict.fromkeys(bench.METRIC_NAMES, 1.9), reals, 0.15)
    m = out["e2e_p90_s"]
    assert m["inside_range"] and not m["within_mean_tolerance"] and not m["pass"]
    close = bench.envelope(dict.fromkeys(bench.METRIC_NAMES, 1.6), reals, 0.15)["e2e_p90_s"]
    assert close["pass"]


@pytest.mark.parametrize("sim", [0.99, 2.01])
def test_outside_the_range_fails(bench: ModuleType, sim: float) -> None:
    reals = _runs(bench, [1.0, 1.5, 2.0])
    out = bench.envelope(dict.fromkeys(bench.METRIC_NAMES, sim), reals, None)
    assert not any(m["pass"] or m["inside_range"] for m in out.values())


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
    reals = _runs(bench, [0.1, 0.2])
    case = {
        "instances": 2,
        "metrics": bench.envelope(dict.fromkeys(bench.METRIC_NAMES, 0.25), reals, None),
        "vllm_runs": [{"host_load": {"load1_mean": 1.5}}, {"host_load": None}],
    }
    rows = bench.table([case], {"2": [3.25]}).splitlines()
    assert len(rows) == 2 + len(bench.METRIC_NAMES) + 4
    assert rows[2] == "| 2 | TTFT p50 | 150 ms | 100..200 ms | 66.7% | 250 ms | +66.7% | no | no |"
    assert rows[-1] == "| 2 | 1.50, ? | 3.25 |"
    assert bench.table([case]).splitlines()[-1] == "| 2 | 1.50, ? | - |"


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
