"""Summaries of a run's request records: per route class and overall."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft_s", "tpot_s", "e2e_s")


def describe(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    arr = np.asarray(values, dtype=float)
    out: dict[str, float | None] = {"mean": float(arr.mean())}
    for p in PERCENTILES:
        out[f"p{p}"] = float(np.percentile(arr, p))
    return out


def _group_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if not r.get("error")]
    out: dict[str, Any] = {"count": len(rows), "errors": len(rows) - len(ok)}
    out["error_rate"] = out["errors"] / len(rows) if rows else 0.0
    for key in LATENCIES:
        out[key] = describe([r[key] for r in ok if r.get(key) is not None])
    inp = sum(r.get("input_tokens", 0) for r in ok)
    hit = sum(r.get("cached_tokens", 0) or 0 for r in ok)
    out["input_tokens"] = inp
    out["cached_tokens"] = hit
    out["prefix_hit_rate"] = hit / inp if inp else 0.0
    out["output_tokens"] = sum(r.get("output_tokens", 0) for r in ok)
    return out


def token_load(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Input tokens computed (not cached) per decode instance: the seeds' `tok max/min`."""
    per: dict[int, int] = defaultdict(int)
    for r in rows:
        inst = r.get("prefill_instance")
        if inst is None or r.get("error"):
            continue
        per[int(inst)] += int(r.get("input_tokens", 0)) - int(r.get("cached_tokens", 0) or 0)
    if not per:
        return {"per_instance": {}, "max": 0, "min": 0, "max_over_min": None}
    mx, mn = max(per.values()), min(per.values())
    return {
        "per_instance": {str(k): v for k, v in sorted(per.items())},
        "max": mx,
        "min": mn,
        "max_over_min": (mx / mn) if mn else None,
    }


def cache_view_accuracy(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Predicted vs engine-reported cached tokens, per cache view (estimated / exact).

    Error = predicted - actual, on the instance that prefilled (for PD requests `cached_tokens`
    is P's hit); positive means the view promised a hit the engine did not have.
    """
    per: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        pred = r.get("predicted_cached_tokens")
        if pred is None or r.get("error") or r.get("pd_fallback"):
            continue
        per[r.get("cache_view") or "unknown"].append(int(pred) - int(r.get("cached_tokens") or 0))
    out: dict[str, Any] = {}
    for view, errs in sorted(per.items()):
        arr = np.asarray(errs, dtype=float)
        out[view] = {
            "count": len(errs),
            "exact_share": float((arr == 0).mean()),
            "mean_error_tokens": float(arr.mean()),
            "mean_abs_error_tokens": float(np.abs(arr).mean()),
            "max_abs_error_tokens": float(np.abs(arr).max()),
            "over_predicted": int((arr > 0).sum()),
        }
    return out


def pd_summary(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Offloaded requests: how many, how many fell back, KV moved and hand-off time."""
    ok = [r for r in rows if not r.get("error")]
    done = [r for r in ok if r.get("t_prefill_done") is not None]
    return {
        "offloaded": len(done),
        "fallbacks": sum(1 for r in ok if r.get("pd_fallback")),
        "kv_transfer_tokens": sum(int(r.get("kv_transfer_tokens") or 0) for r in done),
        "kv_transfer_s": describe([r["kv_transfer_s"] for r in done if r.get("kv_transfer_s")]),
    }


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    rows = list(records)
    by_class: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_class[r.get("route_class") or "UNCLASSIFIED"].append(r)
    return {
        "overall": _group_summary(rows),
        "by_route_class": {k: _group_summary(v) for k, v in sorted(by_class.items())},
        "token_load": token_load(rows),
        "cache_view_accuracy": cache_view_accuracy(rows),
        "pd": pd_summary(rows),
    }


def one_line(summary: Mapping[str, Any]) -> str:
    """A run summary's overall figures in one line, for a person at a terminal (`akvc run`
    prints it on stderr; stdout keeps only the run directory, for scripts)."""
    o = summary["overall"]

    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g} s"

    return (
        f"{o['count']:,} requests, {o['errors']:,} failed; TTFT p50 {sec(o['ttft_s']['p50'])}, "
        f"p90 {sec(o['ttft_s']['p90'])}; E2E p90 {sec(o['e2e_s']['p90'])}; "
        f"prefix hit rate {o['prefix_hit_rate']:.1%}"
    )
