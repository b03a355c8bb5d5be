"""Fitting the cpu-tiny step model: synthetic measurements with known coefficients."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from agentic_kvc.calibrate.engine import QUICK_PLAN, Measurement, Plan, fit, refit
from agentic_kvc.profiles import load_cpu_profile
from agentic_kvc.profiles.linear import FEATURES, LinearStepCost

TRUE = LinearStepCost(
    overhead_s=4e-3,
    per_token_s=1.5e-4,
    per_attn_pair_s=2e-9,
    per_prefill_seq_s=8e-3,
    per_decode_seq_s=6e-4,
    per_kv_token_s=3e-8,
)


def synthetic(cost: LinearStepCost, noise: float = 0.0, seed: int = 0) -> list[Measurement]:
    """The default plan's probe shapes, timed by `cost` with multiplicative noise."""
    rng = random.Random(seed)
    plan = Plan()
    out = []
    for n in plan.prefill_lengths:
        t = cost.step_s([(n, 0)], 0, 0) * (1 + rng.gauss(0, noise))
        out.append(Measurement("prefill", ((n, 0),), 0, 0, t))
    for ctx in plan.decode_contexts:
        for b in plan.decode_batches:
            kv = b * (ctx + 24)
            t = cost.step_s([], b, kv) * (1 + rng.gauss(0, noise))
            out.append(Measurement("decode", (), b, kv, t))
    return out


def test_fit_recovers_known_coefficients() -> None:
    result = fit(synthetic(TRUE))
    for name in FEATURES:
        assert getattr(result.cost, name) == pytest.approx(getattr(TRUE, name), rel=1e-4), name
    assert result.summary()["max_abs_rel_error"] < 1e-6


def test_fit_with_noise_predicts_unseen_steps() -> None:
    result = fit(synthetic(TRUE, noise=0.03, seed=1))
    assert result.summary()["mean_abs_rel_error"] < 0.05
    # Shapes not probed: a mid-size prefill after context, a mixed step, an odd batch.
    for chunks, batch, kv in [([(1500, 400)], 0, 0), ([(300, 0)], 8, 8000), ([], 24, 40_000)]:
        truth = TRUE.step_s(chunks, batch, kv)
        assert result.cost.step_s(chunks, batch, kv) == pytest.approx(truth, rel=0.08)


def test_fit_never_returns_negative_coefficients() -> None:
    # No attention-pair cost at all, plus noise: plain least squares would go negative.
    flat = LinearStepCost(**{**TRUE.as_dict(), "per_attn_pair_s": 0.0, "per_kv_token_s": 0.0})
    result = fit(synthetic(flat, noise=0.05, seed=3))
    assert all(v >= 0 for v in result.cost.as_dict().values())
    assert result.cost.per_token_s == pytest.approx(flat.per_token_s, rel=0.15)


def test_a_disturbed_probe_is_excluded_and_reported() -> None:
    probes = synthetic(TRUE, noise=0.02, seed=4)
    m = probes[1]
    probes[1] = Measurement(m.kind, m.prefill_chunks, 0, 0, m.seconds * 6)  # a stalled probe
    result = fit(probes)
    assert [r["excluded"] for r in result.residuals].count(True) == 1
    assert result.residuals[1]["excluded"]
    assert result.summary()["excluded_outliers"] == 1
    assert result.cost.per_token_s == pytest.approx(TRUE.per_token_s, rel=0.1)


def test_refit_recomputes_a_profile_file_from_its_probes(tmp_path: Path) -> None:
    result = fit(synthetic(TRUE, noise=0.02, seed=5))
    path = tmp_path / "cpu.json"
    stale = {name: 1.0 for name in FEATURES}
    doc = {
        "coefficients": stale,
        "residuals": result.residuals,
        "kv_bytes_per_token": 1024,
        "serving_fit": {"prefill_scale": 2.0},
    }
    path.write_text(json.dumps(doc))
    out = refit(path)
    assert out["coefficients"] == result.cost.as_dict()
    assert "serving_fit" not in out  # it scaled the old coefficients
    assert json.loads(path.read_text())["coefficients"] == result.cost.as_dict()
    path.write_text(json.dumps({"residuals": [{"kind": "prefill"}]}))
    with pytest.raises(ValueError, match="field 'residuals'"):
        refit(path)


def test_fit_rejects_unidentifiable_probes() -> None:
    only_decode = [m for m in synthetic(TRUE) if m.kind == "decode"]
    with pytest.raises(ValueError, match="both prefill and decode"):
        fit(only_decode)
    with pytest.raises(ValueError, match="at least"):
        fit(synthetic(TRUE)[:3])
    bad = synthetic(TRUE)
    bad[2] = Measurement("prefill", ((10, 0),), 0, 0, 0.0)
    with pytest.raises(ValueError, match="measurement 2"):
        fit(bad)


def test_fitted_cost_round_trips_through_a_profile_file(tmp_path: Path) -> None:
    result = fit(synthetic(TRUE))
    path = tmp_path / "cpu.json"
    doc = {
        "coefficients": result.cost.as_dict(),
        "kv_bytes_per_token": 1024,
        "kv_capacity_tokens": 4096,
        "vllm_version": "x",
        "date": "d",
    }
    path.write_text(json.dumps(doc))
    prof = load_cpu_profile(path)
    assert prof.cost == result.cost and prof.kv_capacity_tokens == 4096


@pytest.mark.vllm
@pytest.mark.slow
def test_calibrate_against_the_real_cpu_engine(tmp_path: Path, tiny_model: Path) -> None:
    from agentic_kvc.calibrate.engine import calibrate

    out = tmp_path / "cpu-tiny.json"
    doc = calibrate(out, tmp_path / "logs", QUICK_PLAN)
    prof = load_cpu_profile(out)
    assert doc["vllm_version"] and doc["machine"]["cpu"] is not None
    assert prof.kv_capacity_tokens == doc["engine"]["num_gpu_blocks"] * doc["engine"]["block_size"]
    # A real engine: 3k-token prefills cost far more than 64-token ones (even on a busy core),
    # and the fit follows the probes it was fitted on.
    prefill = [r["measured_s"] for r in doc["residuals"] if r["kind"] == "prefill"]
    assert prefill[-1] > 2 * prefill[0]
    assert doc["fit"]["mean_abs_rel_error"] < 0.3


@pytest.mark.vllm
@pytest.mark.slow
def test_serving_fit_against_a_real_replay(tmp_path: Path, tiny_model: Path) -> None:
    """The serving stage on a real run directory: one real instance, a short replay."""
    import json

    from agentic_kvc.calibrate.serving_fit import ServingRun, fit_serving, serving_config
    from agentic_kvc.runs import execute

    cfg = serving_config(1)
    small = cfg.workload.generator.model_copy(update={"sessions": 8})
    cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"generator": small})})
    run_dir = execute(cfg, tmp_path / "results")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # with a spare core, the engine's frontends were started off the worker's core
    fleet = manifest["backend_info"]["fleet"]["instances"][0]
    if len(os.sched_getaffinity(0)) > 1:
        assert fleet["frontend_cores"] and fleet["core"] not in fleet["frontend_cores"]
    base = load_cpu_profile(serving_fit=False)
    result = fit_serving(base, [ServingRun(run_dir)], host_cores=2)
    assert 0.5 <= result["prefill_scale"] <= 4.0
    assert result["loss"] <= result["loss_before"]
    assert result["contended_slowdown"] is None  # no run without a spare core was given
