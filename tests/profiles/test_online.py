"""The online cost fit (profiles/online.py): it recovers a known affine engine, follows a
step change, and runs inside the router's bookkeeping in the simulator."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from agentic_kvc.profiles.online import (
    GENERIC_PRIOR,
    TERMS,
    OnlineAffineFit,
    StreamObserver,
    decode_features,
    ttft_features,
)

# A known affine engine (the H20 profile's fit, rounded) and a prior wrong by 2x both ways.
TRUTH = (0.015, 7e-5, 8e-9, 2e-4, 1.5e-8)
WRONG = tuple(v * f for v, f in zip(TRUTH, (2.0, 0.5, 2.0, 0.5, 2.0), strict=True))


def observations(rng: random.Random, theta: tuple[float, ...], noise: float):
    """One TTFT and one decode observation of a request on a random fleet state, timed by
    `theta` with multiplicative noise (the sums of steps a router sees)."""
    pending = rng.choice((0, 0, rng.randint(0, 40_000)))
    uncached = rng.randint(1, 30_000)
    cached = rng.choice((0, rng.randint(0, 100_000)))
    decodes = rng.randint(0, 48)
    kv = decodes * rng.randint(1_000, 60_000)
    x_t = ttft_features(pending, uncached, cached, uncached / 2, decodes, kv, 8192)
    x_d = decode_features(
        decodes + 1, kv + 20_000, rng.uniform(0, 300), rng.uniform(0, 300) * rng.uniform(0, 8e4)
    )
    for x in (x_t, x_d):
        y = sum(a * b for a, b in zip(x, theta, strict=True))
        yield x, y * (1 + rng.gauss(0, noise))


def relative_errors(fit: OnlineAffineFit, theta: tuple[float, ...]) -> list[float]:
    return [abs(f - t) / t for f, t in zip(fit.coefficients(), theta, strict=True)]


# Stated tolerance after 300 requests (600 observations, 5% noise each), from a prior 2x
# off: 10% per term, but 35% for per_decode_seq_s, which every decode step sees only beside
# per_token_s (both scale with the batch) and so is weakly identified (its worst over 30
# streams was 28%); and the fitted model's predictions within 3% of the truth's on average.
TOLERANCE = {t: 0.35 if t == "per_decode_seq_s" else 0.10 for t in TERMS}


def prediction_error(fit: OnlineAffineFit, theta: tuple[float, ...]) -> float:
    rng = random.Random(99)
    errs = [
        abs(fit.predict(x) - y) / y for _ in range(200) for x, y in observations(rng, theta, 0.0)
    ]
    return sum(errs) / len(errs)


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_recovers_known_affine_engine_from_wrong_prior(seed: int) -> None:
    rng = random.Random(seed)
    fit = OnlineAffineFit(WRONG)
    assert max(relative_errors(fit, TRUTH)) >= 0.5  # it does start wrong
    assert prediction_error(fit, TRUTH) > 0.3
    for _ in range(300):
        for x, y in observations(rng, TRUTH, 0.05):
            fit.update(x, y)
    errs = dict(zip(TERMS, relative_errors(fit, TRUTH), strict=True))
    assert all(errs[t] < TOLERANCE[t] for t in TERMS), errs
    assert prediction_error(fit, TRUTH) < 0.03
    # the exposed error shrank from the prior's, and names the weakly identified term
    rel_sd = [s / t for s, t in zip(fit.coefficient_sd(), TRUTH, strict=True)]
    assert all(0 < r < 0.3 for r in rel_sd), rel_sd
    assert max(rel_sd) == rel_sd[TERMS.index("per_decode_seq_s")]


def test_generic_prior_converges_too() -> None:
    rng = random.Random(3)
    fit = OnlineAffineFit(None)
    assert fit.coefficients() == pytest.approx(GENERIC_PRIOR)
    for _ in range(400):
        for x, y in observations(rng, TRUTH, 0.05):
            fit.update(x, y)
    errs = dict(zip(TERMS, relative_errors(fit, TRUTH), strict=True))
    assert all(errs[t] < TOLERANCE[t] for t in TERMS), errs


def test_follows_a_step_change() -> None:
    """The engine slows down mid-run (per-token and overhead x2: a new version or a
    neighbour): within 300 requests the fit is within 10% of the new truth."""
    rng = random.Random(11)
    fit = OnlineAffineFit(TRUTH)
    for _ in range(300):
        for x, y in observations(rng, TRUTH, 0.05):
            fit.update(x, y)
    slow = (TRUTH[0] * 2, TRUTH[1] * 2, *TRUTH[2:])
    for _ in range(300):
        for x, y in observations(rng, slow, 0.05):
            fit.update(x, y)
    errs = relative_errors(fit, slow)
    assert all(e < TOLERANCE[t] for e, t in zip(errs, TERMS, strict=True)), errs
    assert prediction_error(fit, slow) < 0.05
    # without forgetting the same data leave it between the two engines
    rigid = OnlineAffineFit(TRUTH, forgetting=1.0)
    rng = random.Random(11)
    for theta in (TRUTH, slow):
        for _ in range(300):
            for x, y in observations(rng, theta, 0.05):
                rigid.update(x, y)
    assert relative_errors(rigid, slow)[1] > 2 * errs[1]
    assert prediction_error(rigid, slow) > prediction_error(fit, slow)


def test_ignores_non_times_and_rejects_bad_config() -> None:
    fit = OnlineAffineFit(TRUTH)
    assert fit.update((1, 1, 1, 1, 1), 0.0) is None
    assert fit.update((1, 1, 1, 1, 1), float("nan")) is None
    assert fit.observations == 0
    with pytest.raises(ValueError, match="prior"):
        OnlineAffineFit((1.0, 2.0))
    with pytest.raises(ValueError, match="forgetting"):
        OnlineAffineFit(TRUTH, forgetting=1.5)
    with pytest.raises(ValueError, match="budget"):
        StreamObserver(fit, 0)


def test_ttft_features_match_predicted_ttft() -> None:
    """x . theta is the formula predicted_ttft prices a candidate with."""
    from agentic_kvc.policy.base import InstanceView
    from agentic_kvc.policy.predicted_ttft import predict_ttft_s
    from agentic_kvc.profiles.cost import AffineStepCost

    cost = AffineStepCost(*TRUTH)
    inst = InstanceView(index=0, pending_prefill_tokens=12_000, decode_requests=9)
    inst.decode_tokens = 90_000
    x = ttft_features(12_000, 5_000, 3_000, 4_000.0, 9, 90_000, 8192)
    got = sum(a * b for a, b in zip(x, TRUTH, strict=True))
    assert got == pytest.approx(predict_ttft_s(inst, 5_000, 3_000, 4_000.0, cost, 8192))


@dataclass
class _Inst:
    pending_prefill_tokens: int = 0
    decode_requests: int = 0
    decode_tokens: int = 0


def test_observer_reads_ttft_and_gap_from_router_hooks() -> None:
    """Through RouterState: admit, first token and finish at given times give one TTFT and
    one decode observation with the window's decode batch."""
    from agentic_kvc.policy.base import Decision, RequestView
    from agentic_kvc.policy.fleet import RouterState

    seen: list[tuple[tuple[float, ...], float, str]] = []

    class Spy(OnlineAffineFit):
        def update(self, x, y, kind="ttft"):  # type: ignore[no-untyped-def]
            seen.append((tuple(x), y, kind))
            return super().update(x, y, kind)

    state = RouterState(1)
    state.observer = StreamObserver(Spy(TRUTH), 8192)
    req = RequestView("r1", "s", 0, 1000, 11)
    t = state.admit(req, Decision(0, 0, "colocated", "x", predicted_cached_tokens=200), now=1.0)
    state.first_token(t, 1.5)
    state.finish(t, 11, now=2.5)
    (x_t, y_t, k_t), (x_d, y_d, k_d) = seen
    assert (k_t, k_d) == ("ttft", "decode")
    assert y_t == pytest.approx(0.5) and y_d == pytest.approx(0.1)  # 1 s over 10 steps
    assert x_t == ttft_features(0, 800, 200, 500.0, 0, 0, 8192)
    # alone in its batch for the whole window; its own 800 prefill tokens came before it
    assert x_d == pytest.approx(decode_features(1, 1000, 0, 0))
    assert state.instances[0].decode_requests == 0  # the bookkeeping itself is unchanged


def _sim(sets: list[str]):  # type: ignore[no-untyped-def]
    from pathlib import Path

    from agentic_kvc.config import load_config
    from agentic_kvc.sim.fleet import SimFleet
    from agentic_kvc.sim.run_backend import profile_for
    from agentic_kvc.workload import load_workload

    repo = Path(__file__).resolve().parents[2]
    cfg = load_config(
        repo / "config/runs/sim_h20_agentic.yaml",
        ["workload.generator.sessions=60", "policy.name=predicted_ttft", *sets],
    )
    fleet = SimFleet(cfg, load_workload(cfg.workload, cfg.seed), profile_for(cfg))
    fleet.run()
    return fleet


def test_online_fit_in_the_simulator_moves_toward_the_engine() -> None:
    """The simulator's engine (the H20 profile, not affine) is the truth; the router sees
    only its streams. From a prior 2x off, the fit ends closer to the profile's own affine
    fit on every well-identified term, receipts carry it, and the run is deterministic."""
    from agentic_kvc.policy.predicted_ttft import fitted_cost

    wrong = "{overhead_s: 2, per_token_s: 0.5, per_attn_pair_s: 2, per_kv_token_s: 2}"
    sets = ["policy.params.cost_model=online", f"policy.params.cost_scale={wrong}"]
    fleet = _sim(sets)
    fit = fleet.policy.fit
    assert fit.by_kind["ttft"] > 100 and fit.by_kind["decode"] > 100
    ref = fitted_cost("h20", "qwen3-coder-30b-a3b")
    for t, prior, now in zip(TERMS, fit.prior, fit.coefficients(), strict=True):
        if t == "per_decode_seq_s":
            continue
        truth = getattr(ref, t)
        assert abs(now - truth) < abs(prior - truth) / 2, (t, prior, now, truth)
    last = fleet.records[-1].scores["cost_model"]
    assert last["observations"] > 0 and len(last["coef"]) == len(TERMS)
    again = _sim(sets)
    assert [r.prefill_instance for r in again.records] == [
        r.prefill_instance for r in fleet.records
    ]
    assert again.policy.fit.coefficients() == fit.coefficients()


def test_profile_mode_attaches_no_observer() -> None:
    fleet = _sim([])
    assert fleet.state.observer is None
    assert "cost_model" not in fleet.records[-1].scores


def test_online_observe_picks_the_observations() -> None:
    fleet = _sim(["policy.params.cost_model=online", "policy.params.online_observe=ttft"])
    assert fleet.policy.fit.by_kind.get("ttft", 0) > 100
    assert "decode" not in fleet.policy.fit.by_kind
    fleet = _sim(["policy.params.cost_model=online", "policy.params.online_observe=decode"])
    assert fleet.policy.fit.by_kind.get("decode", 0) > 100
    assert "ttft" not in fleet.policy.fit.by_kind


def bursty_streams(rng: random.Random, theta: tuple[float, ...], share: float):
    """`observations` as a router behind a coalescing API server relays them: a stream of
    8-64 tokens decoded at the true step time, but `share` of the streams reach the router in
    one burst once the engine has produced them all: the first token late by the whole
    decode (its TTFT reads long) and the rest ~10 us apart (its decode span reads ~0)."""
    (x_t, y_t), (x_d, y_d) = observations(rng, theta, 0.05)
    steps = rng.randint(8, 64) - 1
    if rng.random() < share:
        return (x_t, y_t + y_d * steps), (x_d, 1e-5 * steps, steps)
    return (x_t, y_t), (x_d, y_d * steps, steps)


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_recovers_affine_engine_through_delivery_bursts(seed: int) -> None:
    """A tenth of the streams arrive as one burst (H2 saw 2-27 of 65 on real vLLM CPU
    engines): the decode gate drops their spans and the fit still recovers the engine within
    the clean recovery test's tolerance; fitting the burst spans as steps (the observer's
    old path, `update(x, span / steps)`) does not. The bursts' late TTFTs are still fitted
    (the observer cannot tell them at the first token): at a fifth of the streams they push
    the overhead ~12% high for one seed, so this share is the gate's tested range."""
    fits = {"gated": OnlineAffineFit(WRONG), "ungated": OnlineAffineFit(WRONG)}
    for name, fit in fits.items():
        rng = random.Random(seed)
        for _ in range(300):
            (x_t, y_t), (x_d, span, steps) = bursty_streams(rng, TRUTH, 0.1)
            fit.update(x_t, y_t, "ttft")
            if name == "gated":
                fit.observe_decode(x_d, span, steps)
            else:
                fit.update(x_d, span / steps, "decode")
    gated, ungated = fits["gated"], fits["ungated"]
    errs = dict(zip(TERMS, relative_errors(gated, TRUTH), strict=True))
    assert all(errs[t] < TOLERANCE[t] for t in TERMS), errs
    bad = dict(zip(TERMS, relative_errors(ungated, TRUTH), strict=True))
    assert not all(bad[t] < TOLERANCE[t] for t in TERMS), bad
    assert prediction_error(ungated, TRUTH) > 2 * prediction_error(gated, TRUTH)
    # every burst was dropped, and counted; no clean stream was
    dropped = gated.snapshot()["dropped"]["decode_burst"]
    assert dropped == 300 - gated.by_kind["decode"]
    assert 15 < dropped < 50  # ~10% of 300
    # relative errors are bounded: a burst's gap of microseconds cannot read as 6000%
    assert 0 <= ungated.rel_error["decode"] <= 1
    assert gated.rel_error["decode"] < 0.2


def test_decode_gate_opens_only_once_the_overhead_is_known() -> None:
    """The floor is a tenth of the overhead less two standard errors: 0 at a prior of 100% sd, so an
    uninformed fit drops nothing; it stays below a tenth of the overhead estimate."""
    fit = OnlineAffineFit(TRUTH)
    assert fit.gap_floor_s() == 0.0
    assert fit.observe_decode(decode_features(1, 0, 0, 0), 1e-6, 10) is not None
    rng = random.Random(5)
    for _ in range(100):
        for x, y in observations(rng, TRUTH, 0.05):
            fit.update(x, y)
    assert 0 < fit.gap_floor_s() < fit.coefficients()[0] / 10
    n = fit.observations
    assert fit.observe_decode(decode_features(1, 0, 0, 0), 1e-5, 10) is None
    assert fit.observations == n and fit.dropped == {"decode_burst": 1}
