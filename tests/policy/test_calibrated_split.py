"""calibrated_split: splits only when the fitted model predicts a lower TTFT by the margin."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.calibrated_split import (
    CalibratedSplit,
    CalibratedSplitParams,
    break_even_new_tokens,
    params_from_calibration,
    predict_ttft_ms,
)


def _fleet(d_pending: int, p_pending: int) -> FleetView:
    return FleetView(
        [
            InstanceView(0, pending_prefill_tokens=d_pending),
            InstanceView(1, pending_prefill_tokens=p_pending),
        ]
    )


def _req(n: int) -> RequestView:
    return RequestView("r", None, 0, n, 8, block_size=16)


def test_split_only_when_d_has_a_prefill_queue() -> None:
    pol = CalibratedSplit(CalibratedSplitParams(prefill_ms_per_token=0.1, transfer_alpha_ms=50))
    idle = pol.decide(_req(4000), _fleet(0, 0))
    assert not idle.disaggregated and idle.reason == "colocate_cheaper"
    # Instance 0 has a prefill queue, instance 1 a large decode load: D (by KV cost) is 0,
    # P is 1; colocated waits 50k tokens of prefill, the split only the transfer.
    fleet = FleetView(
        [
            InstanceView(0, pending_prefill_tokens=50_000),
            InstanceView(1, decode_tokens=2_000_000, decode_requests=1),
        ]
    )
    busy = pol.decide(_req(4000), fleet)
    assert (busy.prefill, busy.decode, busy.reason) == (1, 0, "split_pays")
    # A margin larger than the gain keeps it colocated.
    wide = CalibratedSplit(CalibratedSplitParams(prefill_ms_per_token=0.1, margin_ms=10_000))
    assert not wide.decide(_req(4000), fleet).disaggregated


def test_prediction_and_margin() -> None:
    p = CalibratedSplitParams(
        prefill_ms_per_token=0.1,
        transfer_alpha_ms=10,
        transfer_beta_ms_per_byte=1e-6,
        kv_bytes_per_token=100,
        margin_ratio=0.0,
    )
    colo, split = predict_ttft_ms(p, new_on_d=1000, uncached_on_p=1000, d_pending=5000, p_pending=0)
    assert colo == pytest.approx(600.0)
    assert split == pytest.approx(100 + 10 + 0.1)
    assert math.isinf(break_even_new_tokens(p))  # idle fleet, P as cached as D: never


def test_params_from_calibration_names_its_source(tmp_path: Path) -> None:
    cal = {
        "source": "results/lifecycle/cpu",
        "transfer_alpha_ms": 2.0,
        "transfer_beta_ms_per_byte": 1e-7,
        "colo_ttft_ms_per_token": 0.2,
        "colo_ttft_alpha_ms": 30.0,
        "kv_bytes_per_token": 1024,
    }
    f = tmp_path / "calibration.json"
    f.write_text(json.dumps(cal))
    params = CalibratedSplitParams(**params_from_calibration(f))
    assert "results/lifecycle/cpu" in params.calibration_source
    assert params.prefill_ms_per_token == 0.2
    f.write_text(json.dumps({**cal, "transfer_alpha_ms": None}))
    with pytest.raises(ValueError, match="transfer_alpha_ms"):
        params_from_calibration(f)
