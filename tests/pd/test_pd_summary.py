"""The summary's cache-view accuracy and PD sections."""

from __future__ import annotations

import pytest

from agentic_kvc.metrics.summary import summarize


def _rec(view: str, pred: int | None, actual: int, **kw: object) -> dict[str, object]:
    return {
        "route_class": "WARM",
        "input_tokens": 100,
        "cache_view": view,
        "predicted_cached_tokens": pred,
        "cached_tokens": actual,
        **kw,
    }


def test_accuracy_per_view_and_pd_counts() -> None:
    rows = [
        _rec("exact", 64, 64),
        _rec("exact", 32, 32),
        _rec("estimated", 96, 64),
        _rec("estimated", 0, 32),
        _rec("estimated", 50, 0, error="boom"),  # failed: not an accuracy sample
        _rec("estimated", 90, 0, pd_fallback="prefill timed out"),  # ran elsewhere
        _rec("exact", 0, 0, t_prefill_done=1.0, kv_transfer_tokens=100, kv_transfer_s=0.5),
    ]
    out = summarize(rows)
    acc = out["cache_view_accuracy"]
    assert acc["exact"]["count"] == 3 and acc["exact"]["exact_share"] == 1.0
    est = acc["estimated"]
    assert est["count"] == 2 and est["exact_share"] == 0.0
    assert est["mean_abs_error_tokens"] == pytest.approx(32.0)
    assert est["mean_error_tokens"] == pytest.approx(0.0) and est["over_predicted"] == 1
    assert out["pd"]["offloaded"] == 1 and out["pd"]["fallbacks"] == 1
    assert out["pd"]["kv_transfer_tokens"] == 100
    assert out["pd"]["kv_transfer_s"]["mean"] == pytest.approx(0.5)
