"""The EPD simulation: deterministic, encoder stall only in default, one-iteration wait."""

from __future__ import annotations

import statistics

from agentic_kvc.epd.bench import run_metrics
from agentic_kvc.epd.sim import EPDSimConfig, MMRequest, simulate, visionarena_like


def test_deterministic_and_epd_removes_the_encoder_stall_from_tpot() -> None:
    reqs = visionarena_like(60, seed=3)
    a = simulate(reqs, EPDSimConfig(mode="default"))
    assert a == simulate(reqs, EPDSimConfig(mode="default"))
    e = simulate(reqs, EPDSimConfig(mode="epd"))
    assert {r["req_id"] for r in e} == {r.req_id for r in reqs}
    assert run_metrics(e)["median_tpot_ms"] < 0.7 * run_metrics(a)["median_tpot_ms"]


def test_single_request_pays_encode_transfer_and_one_pd_iteration() -> None:
    req = [MMRequest(0, text_tokens=50, image_patches=4096, output_tokens=4)]
    d = simulate(req, EPDSimConfig(mode="default"))[0]
    e = simulate(req, EPDSimConfig(mode="epd"))[0]
    # Same compute, plus transfer and the idle injection iteration: EPD's TTFT is later.
    assert e["ttft_s"] > d["ttft_s"]
    slow = simulate(req, EPDSimConfig(mode="epd", transfer_gb_s=0.01))[0]
    nbytes = 1024 * 2048 * 2
    assert slow["ttft_s"] - e["ttft_s"] > 0.9 * nbytes / 0.01e9


def test_encoder_cache_capacity_gates_preallocation() -> None:
    reqs = visionarena_like(30, seed=5)
    big = max(r.image_tokens for r in reqs)
    roomy = simulate(reqs, EPDSimConfig(mode="epd", encoder_cache_tokens=100 * big))
    tight = simulate(reqs, EPDSimConfig(mode="epd", encoder_cache_tokens=big))
    med = lambda rs: statistics.median(r["ttft_s"] for r in rs)  # noqa: E731
    assert med(tight) > med(roomy)
