"""predicted_ttft with `split`: split candidates scored with the KV pull, O(n), opt-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_kvc.policy import get_policy, predicted_ttft
from agentic_kvc.policy.base import FleetView, InstanceView
from agentic_kvc.policy.predicted_ttft import (
    PredictedTTFTParams,
    profile_kv_bytes,
    split_params_from_calibration,
    split_params_from_sim,
)
from tests.policy.policy_helpers import fleet, req

H20 = ("h20", "qwen3-coder-30b-a3b")
SIM = split_params_from_sim(*H20, kv_transfer_fixed_s=0.05, kv_transfer_gbps=200.0)


def _cache_on_a_busy_decoder() -> FleetView:
    # Instance 1 holds 28k of the prompt but runs 60 long decodes; instance 0 is idle and
    # holds nothing. A new session's decode belongs on 0 (the decode term); recomputing 30k
    # there is slower than prefilling the 2k P lacks on 1 and pulling the KV.
    return fleet(
        2,
        cached={1: 28_000},
        decode_requests=[0, 60],
        decode_tokens=[0, 60 * 20_000],
        num_requests=[0, 60],
    )


def test_splits_when_the_cache_is_on_a_busy_decoder_and_the_pull_is_cheap() -> None:
    r = req(input_tokens=30_000, output_tokens=500, session="new")
    colo = get_policy("predicted_ttft").decide(r, _cache_on_a_busy_decoder())
    assert not colo.disaggregated
    d = get_policy("predicted_ttft", SIM).decide(r, _cache_on_a_busy_decoder())
    assert (d.prefill, d.decode, d.reason) == (1, 0, "min_predicted_ttft_split")
    assert d.route_class.endswith("_P2P")
    # The split's predicted score beats the best colocated one, which the scores still name.
    assert d.scores["split"]["pred_s"] < min(d.scores[0], d.scores[1])


def test_no_split_when_the_pull_is_expensive() -> None:
    r = req(input_tokens=30_000, output_tokens=500, session="new")
    slow = get_policy("predicted_ttft", {**SIM, "transfer_gbps": 0.1})  # 2.9 GB take ~4 min
    d = slow.decide(r, _cache_on_a_busy_decoder())
    assert not d.disaggregated and d.reason == "min_predicted_ttft"


def test_d_queue_is_not_overlapped_with_p_prefill() -> None:
    # D (0) has 60k tokens queued, P (1) is idle but decodes heavily: the handed-over request
    # would queue behind D's prefills anyway, so the split saves nothing and costs the pull.
    view = fleet(
        2,
        pending_prefill_tokens=[60_000, 0],
        decode_requests=[0, 60],
        decode_tokens=[0, 60 * 20_000],
        num_requests=[3, 60],
    )
    r = req(input_tokens=30_000, output_tokens=500, session="new")
    d = get_policy("predicted_ttft", SIM).decide(r, view)
    assert not d.disaggregated and d.decode == 0


def test_no_split_on_an_idle_fleet() -> None:
    pol = get_policy("predicted_ttft", SIM)
    for n in (2, 8):
        assert not pol.decide(req(input_tokens=20_000, session=None), fleet(n)).disaggregated


def test_a_pd_fleet_always_splits_to_a_decode_instance() -> None:
    view = FleetView(
        [
            InstanceView(0, role="prefill", pending_prefill_tokens=50_000),
            InstanceView(1, role="prefill"),
            InstanceView(2, role="decode", decode_requests=30, decode_tokens=600_000),
            InstanceView(3, role="decode"),
        ]
    )
    d = get_policy("predicted_ttft", SIM).decide(req(input_tokens=8000, session=None), view)
    assert (d.prefill, d.decode) == (1, 3)


def test_choice_is_linear_in_the_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = predicted_ttft.predict_ttft_s

    def counted(*args: object, **kw: object) -> float:
        calls["n"] += 1
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(predicted_ttft, "predict_ttft_s", counted)
    pol = get_policy("predicted_ttft", SIM)
    for n in (64, 256):
        calls["n"] = 0
        view = fleet(n, pending_prefill_tokens=[1000 * (i % 7) for i in range(n)])
        pol.decide(req(input_tokens=10_000, session=None), view)
        # ttft per candidate and D's queue per decode candidate: 2n, never n^2 pairs.
        assert calls["n"] <= 2 * n


def test_transfer_time_is_the_simulators() -> None:
    from agentic_kvc.policy.predicted_ttft import _Parts

    p = PredictedTTFTParams(**SIM)
    r = req(input_tokens=10_000)
    view = fleet(2, cached={1: 4000})
    parts = _Parts(p, r, view, view.instances)
    bytes_per_s = 200.0 * 1e9 / 8  # sim/fleet.py: kv_transfer_gbps * 1e9 / 8
    for d, lacks in ((0, 10_000), (1, 6000)):
        want = 0.05 + lacks * profile_kv_bytes(*H20) / bytes_per_s
        assert parts.transfer_s(view.instances[d]) == pytest.approx(want)


def test_params_from_a_lifecycle_calibration(tmp_path: Path) -> None:
    f = tmp_path / "calibration.json"
    cal = {"source": "run-x", "transfer_alpha_ms": 20.0, "transfer_beta_ms_per_byte": 1e-7}
    f.write_text(json.dumps({**cal, "kv_bytes_per_token": 2048}))
    p = PredictedTTFTParams(**split_params_from_calibration(f))
    assert p.split and "run-x" in p.transfer_source and p.kv_bytes_per_token == 2048
    # The pull of b bytes costs alpha + beta * b, as the calibration fitted it.
    b = 1e6
    assert p.transfer_fixed_s + b * 8 / (p.transfer_gbps * 1e9) == pytest.approx(
        0.02 + 1e-4
    )  # 1e-7 ms x 1e6
    f.write_text(json.dumps({"transfer_alpha_ms": 20.0}))
    with pytest.raises(ValueError, match="transfer_beta_ms_per_byte"):
        split_params_from_calibration(f)
