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


class _Held:
    """A cache view in which instance `index` holds the first `tokens` of every prompt."""

    def __init__(self, index: int, tokens: int) -> None:
        self.index, self.tokens = index, tokens

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        return [self.tokens if i == self.index else 0 for i in range(n_instances)]


def test_a_queue_on_d_alone_does_not_split() -> None:
    """A handed-over request still waits behind D's queued prefills: both sides carry it."""
    pol = CalibratedSplit(CalibratedSplitParams(prefill_ms_per_token=0.1, transfer_alpha_ms=50))
    idle = pol.decide(_req(4000), _fleet(0, 0))
    assert not idle.disaggregated and idle.reason == "colocate_cheaper"
    # Instance 0 has a prefill queue, instance 1 a large decode load: D (by KV cost) is 0,
    # P is 1 and holds nothing more than D, so the split only adds the transfer.
    fleet = FleetView(
        [
            InstanceView(0, pending_prefill_tokens=50_000),
            InstanceView(1, decode_tokens=2_000_000, decode_requests=1),
        ]
    )
    assert not pol.decide(_req(4000), fleet).disaggregated


def test_split_when_p_holds_the_prompt_and_d_is_the_cheaper_decode_home() -> None:
    pol = CalibratedSplit(CalibratedSplitParams(prefill_ms_per_token=0.1, transfer_alpha_ms=50))
    # Instance 1 holds the whole prompt but decodes a lot, so D (by KV cost) is instance 0;
    # colocated computes 4,000 tokens on D (400 ms), the split ~0 on P plus the transfer.
    fleet = FleetView(
        [InstanceView(0), InstanceView(1, decode_tokens=2_000_000, decode_requests=1)],
        cache=_Held(1, 4000),
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
    # P's prefill, the transfer, then D's queue of 5,000 tokens.
    assert split == pytest.approx(100 + 10 + 0.1 + 500)
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
