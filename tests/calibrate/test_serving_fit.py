"""The serving calibration stage: scaling, profile loading, and recovery of known scales."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from agentic_kvc.calibrate.serving_fit import (
    ServingRun,
    _grid_search,
    fit_background,
    fit_serving,
    serving_config,
)
from agentic_kvc.profiles import CPU_TINY_FILE, load_cpu_profile
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.profiles.fitted import apply_fit, scaled_cost, under_background, with_background
from agentic_kvc.profiles.linear import LinearStepCost
from agentic_kvc.sim.run_backend import prepare_sim

COST = LinearStepCost(1.0, 2.0, 3.0, 4.0, 5.0, 6.0)


def test_scales_split_prefill_terms_from_step_terms() -> None:
    c = scaled_cost(COST, prefill=10.0, step=100.0)
    assert (c.per_token_s, c.per_attn_pair_s, c.per_prefill_seq_s) == (20.0, 30.0, 40.0)
    assert (c.overhead_s, c.per_decode_seq_s, c.per_kv_token_s) == (100.0, 500.0, 600.0)


def test_grid_search_finds_a_minimum_between_grid_points() -> None:
    target = np.array([1.37, 2.9])
    best, loss = _grid_search(
        lambda x: float(np.sum(np.log(x / target) ** 2)),
        np.array([0.5, 0.5]),
        np.array([4.0, 4.0]),
        points=9,
        rounds=3,
    )
    assert np.allclose(best, target, rtol=0.03) and loss < 1e-3


def _profile_with_fit(tmp_path: Path, fit: object) -> Path:
    doc = json.loads(CPU_TINY_FILE.read_text())
    doc["serving_fit"] = fit
    path = tmp_path / "cpu-tiny.json"
    path.write_text(json.dumps(doc))
    return path


def test_profile_applies_the_fit_and_the_contended_cost(tmp_path: Path) -> None:
    fit = {
        "prefill_scale": 2.0,
        "step_scale": 2.0,
        "host_cores": 2,
        "contended_slowdown": {"prefill": 5.0, "step": 7.0},
    }
    path = _profile_with_fit(tmp_path, fit)
    raw = load_cpu_profile(path, serving_fit=False)
    one = load_cpu_profile(path, instances=1)
    two = load_cpu_profile(path, instances=2)
    assert isinstance(raw.cost, LinearStepCost) and raw.contended_cost is None
    # a spare core: the scale only, and instances never slow each other
    assert one.cost == scaled_cost(raw.cost, 2.0, 2.0) and one.contended_cost is None
    # none spare: the same alone, slower while another instance is mid-step
    assert two.cost == one.cost
    assert two.contended_cost == scaled_cost(raw.cost, 10.0, 14.0)
    assert "no spare core" in two.source
    broken = _profile_with_fit(tmp_path, {"prefill_scale": 2.0})
    with pytest.raises(ValueError, match=r"cpu-tiny\.json: field 'serving_fit'"):
        load_cpu_profile(broken)


def _fake_real_run(
    tmp_path: Path,
    instances: int,
    profile: EngineProfile,
    name: str,
    background: float | None = None,
) -> Path:
    """A 'real' run directory whose records come from the simulator with a known profile (beside
    `background` runnable threads of other processes, recorded in its manifest as a real run's)."""
    cfg = serving_config(instances)
    small = cfg.workload.generator.model_copy(update={"sessions": 12})  # keeps the fit quick
    cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"generator": small})})
    sim = cfg.sim.model_copy(update={"host_neighbour_threads": background or 0.0})
    records = prepare_sim(cfg.model_copy(update={"backend": "sim", "sim": sim}))(profile)
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.canonical()))
    (run_dir / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if background is not None:
        window = {"others_runnable": {"mean": background, "max": background}}
        manifest = {"backend_info": {"host_load": {"replay": window}}}
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


# Step costs with every kind of term (the 2026-11-23 calibration's), fixed so that what this
# test recovers does not move with each recalibration of the package's profile.
KNOWN = {
    "overhead_s": 1.69e-3,
    "per_token_s": 0.0,
    "per_attn_pair_s": 2.19e-8,
    "per_prefill_seq_s": 1.281e-2,
    "per_decode_seq_s": 0.0,
    "per_kv_token_s": 5.0e-9,
}


def test_fit_recovers_known_scale_and_contended_slowdown(tmp_path: Path) -> None:
    doc = json.loads(CPU_TINY_FILE.read_text())
    doc["coefficients"] = KNOWN
    doc.pop("serving_fit", None)
    (tmp_path / "known.json").write_text(json.dumps(doc))
    base = load_cpu_profile(tmp_path / "known.json", serving_fit=False)
    assert isinstance(base.cost, LinearStepCost)
    one = _fake_real_run(tmp_path, 1, apply_fit(base, 1.6, None), "one")
    two = _fake_real_run(tmp_path, 2, apply_fit(base, 1.6, (2.0, 1.5)), "two")
    result = fit_serving(base, [ServingRun(one), ServingRun(two)], host_cores=2)
    assert result["prefill_scale"] == result["step_scale"] == pytest.approx(1.6, rel=0.05)
    slow = result["contended_slowdown"]
    assert slow["prefill"] == pytest.approx(2.0, rel=0.15)
    assert slow["step"] == pytest.approx(1.5, rel=0.2)
    assert result["loss"] < result["loss_before"]
    for run in result["runs"]:
        assert max(abs(v) for v in run["rel_error"].values()) < 0.2  # queueing amplifies


def test_fit_over_repeats_lands_between_them(tmp_path: Path) -> None:
    """Two replays of one config on a host whose speed moved: the fitted scale is neither draw
    but between them (their geometric mean, the losses being means of squared log ratios)."""
    doc = json.loads(CPU_TINY_FILE.read_text())
    doc["coefficients"] = KNOWN
    doc.pop("serving_fit", None)
    (tmp_path / "known.json").write_text(json.dumps(doc))
    base = load_cpu_profile(tmp_path / "known.json", serving_fit=False)
    slow = _fake_real_run(tmp_path, 1, apply_fit(base, 2.4, None), "slow")
    fast = _fake_real_run(tmp_path, 1, apply_fit(base, 1.2, None), "fast")
    result = fit_serving(base, [ServingRun(slow), ServingRun(fast)], host_cores=2)
    assert 1.2 * 1.1 < result["prefill_scale"] < 2.4 / 1.1
    assert result["prefill_scale"] == pytest.approx((2.4 * 1.2) ** 0.5, rel=0.15)
    assert [r["load1_mean"] for r in result["runs"]] == [None, None]  # no manifest: unknown


def test_fit_needs_a_run_with_a_spare_core(tmp_path: Path) -> None:
    base = load_cpu_profile(serving_fit=False)
    two = _fake_real_run(tmp_path, 2, base, "two")
    with pytest.raises(ValueError, match="fewer instances than the host's 2 cores"):
        fit_serving(base, [ServingRun(two)], host_cores=2)
    shutil.rmtree(two)
    with pytest.raises(ValueError, match="not a run directory"):
        ServingRun(two)


def test_background_term_slows_every_step_by_the_other_processes_cores(tmp_path: Path) -> None:
    base = load_cpu_profile(serving_fit=False)
    prof = with_background(apply_fit(base, 1.5, (2.0, 3.0)), "slowdown", 0.25)
    assert prof.background_slowdown == 0.25 and prof.background_delay_s == 0.0
    slowed = under_background(prof, 2.0)  # 1 + 0.25 * 2
    assert slowed.cost == scaled_cost(prof.cost, 1.5, 1.5)  # type: ignore[arg-type]
    assert slowed.contended_cost == scaled_cost(prof.contended_cost, 1.5, 1.5)  # type: ignore[arg-type]
    assert under_background(prof, 0.0) is prof
    plain = apply_fit(base, 1.5, None)
    assert under_background(plain, 2.0) is plain  # no term: other processes ignored
    # Through a run's config: the simulator applies it (records as with the slowed profile).
    cfg = serving_config(1).model_copy(update={"backend": "sim"})
    small = cfg.workload.generator.model_copy(update={"sessions": 6})
    cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"generator": small})})
    loaded = cfg.model_copy(
        update={"sim": cfg.sim.model_copy(update={"host_neighbour_threads": 2.0})}
    )
    one = with_background(plain, "slowdown", 0.25)
    assert prepare_sim(loaded)(one) == prepare_sim(cfg)(under_background(one, 2.0))
    assert prepare_sim(loaded)(one) != prepare_sim(cfg)(one)
    assert "host_neighbour_threads" not in cfg.canonical()["sim"]  # run ids from before unchanged
    assert loaded.run_id() != cfg.run_id()


def _background_runs(
    tmp_path: Path, form: str, value: float
) -> tuple[EngineProfile, list[ServingRun]]:
    """Replays on 0, 1 and 2 runnable threads of other processes (as recorded in their manifests)
    under a known serving fit with a known background term."""
    doc = json.loads(CPU_TINY_FILE.read_text())
    doc["coefficients"] = KNOWN
    doc.pop("serving_fit", None)
    (tmp_path / "known.json").write_text(json.dumps(doc))
    fitted = apply_fit(load_cpu_profile(tmp_path / "known.json", serving_fit=False), 1.4, None)
    truth = with_background(fitted, form, value)
    runs = [ServingRun(_fake_real_run(tmp_path, 1, truth, f"b{b}", float(b))) for b in (0, 1, 2)]
    assert [r.background for r in runs] == [0.0, 1.0, 2.0]
    return fitted, runs


@pytest.mark.parametrize(("form", "value"), [("slowdown", 0.3), ("delay", 0.12)])
def test_background_stage_recovers_a_known_term(tmp_path: Path, form: str, value: float) -> None:
    fitted, runs = _background_runs(tmp_path, form, value)
    result = fit_background(lambda n: fitted, runs, host_cores=2, form=form)
    assert result["form"] == form and "contended" not in result  # no run without a spare core
    assert result["spare"] == pytest.approx(value, rel=0.15)
    assert result["spare_loss"] < result["spare_loss_before"] / 5
    assert [r["background_threads"] for r in result["runs"]] == [0.0, 1.0, 2.0]


def test_background_stage_refuses_runs_that_cannot_tell_it(tmp_path: Path) -> None:
    fitted, runs = _background_runs(tmp_path, "delay", 0.1)
    with pytest.raises(ValueError, match="background form 'both'"):
        fit_background(lambda n: fitted, runs, host_cores=2, form="both")
    # All on a quiet host (within half a runnable thread): the term cannot be told from the scale.
    for r, b in zip(runs, (0.0, 0.2, 0.4), strict=True):
        r.background = b
    with pytest.raises(ValueError, match=r"span 0\.40 runnable threads"):
        fit_background(lambda n: fitted, runs, host_cores=2)
    runs[1].background = None  # a run from before backgrounds were recorded
    with pytest.raises(ValueError, match=r"no recorded background.*b1"):
        fit_background(lambda n: fitted, runs, host_cores=2)


def test_profile_file_carries_the_background_stage(tmp_path: Path) -> None:
    fit = {
        "prefill_scale": 2.0,
        "step_scale": 2.0,
        "host_cores": 2,
        "contended_slowdown": {"prefill": 5.0, "step": 7.0},
        "background": {"form": "delay", "spare": 0.05, "contended": 0.2},
    }
    path = _profile_with_fit(tmp_path, fit)
    one, two = load_cpu_profile(path, instances=1), load_cpu_profile(path, instances=2)
    assert (one.background_delay_s, two.background_delay_s) == (0.05, 0.2)
    assert one.background_slowdown == two.background_slowdown == 0.0
    assert "50 ms later per runnable thread" in one.source
    assert load_cpu_profile(path, instances=2, background=False).background_delay_s == 0.0


def test_mean_background_is_zero_unless_every_run_recorded_one() -> None:
    from agentic_kvc.calibrate.serving_fit import mean_background

    assert mean_background([0.5, 1.5]) == 1.0
    assert mean_background([0.5, None]) == 0.0  # an older run: no term applies
    assert mean_background([]) == 0.0
