"""From timestamps to the lifecycle breakdown: t-points, phases, transfer detail, the cost fit.

Pure functions over the client's timestamps and the wrapper connector's engine events
(`lifecycle.logging_nixl_connector`); the real-engine runner (`lifecycle.runner`) and the
analysis use them.

T-points (one clock, `time.monotonic_ns`, on one machine), with their source:

| point | meaning | source |
|---|---|---|
| t0 | proxy receives the request | client (the runner is the proxy) |
| t1 | dispatched to P | client, just before P's POST |
| t2 | P schedules it | P's connector `scheduled` |
| t3 | P prefill done | P's connector `finished` (prefill + its one sampled token) |
| tp | P's answer (with the KV params) back at the proxy | client (not in the design's list) |
| t4 | transfer metadata reaches D | D's connector `seen` (D's scheduler reads the params) |
| t5 | first transfer op issued | D worker: start of the call that posted the reads |
| t6 | last transfer op complete | D worker: the poll that found all reads done (upper bound) |
| t7 | D sees the transfer finished | D's connector `recv_done` (scheduler) |
| t8 | D makes the request schedulable | D's connector `scheduled` (first scheduler output) |
| t9 | first token at the client | client (first streamed token) |
| t10 | last token at the client | client |

Phases are the intervals between consecutive points, so with every point observed they sum to
e2e = t10 - t0 exactly; a missing point merges its two neighbours into one phase named
`a+b`, and the record lists the point under `unobserved`. A phase below zero (points out of
order, e.g. a poll that logged later than the scheduler saw it) is kept and flagged.
Not observable without patching vLLM: the instant NIXL's reads really land (t6 is the worker's
poll that saw them done; NIXL's own telemetry gives the transfer duration, kept in
`transfer_detail.nixl_xfer_ms`), and P's prefill end apart from its one sampled token.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

POINTS: tuple[str, ...] = ("t0", "t1", "t2", "t3", "tp", "t4", "t5", "t6", "t7", "t8", "t9", "t10")
PHASES: dict[str, tuple[str, str]] = {
    "routing": ("t0", "t1"),
    "p_queue": ("t1", "t2"),
    "p_prefill": ("t2", "t3"),
    "p_return": ("t3", "tp"),
    "d_dispatch": ("tp", "t4"),
    "handshake": ("t4", "t5"),
    "transfer": ("t5", "t6"),
    "transfer_signal": ("t6", "t7"),
    "d_promotion": ("t7", "t8"),
    "d_first_token": ("t8", "t9"),
    "d_decode": ("t9", "t10"),
}
PHASE_ORDER: tuple[str, ...] = tuple(PHASES)
RESIDUAL_LIMIT = 0.05  # the design's "phases sum to e2e within 5%"


def _ms(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else (b - a) / 1e6


def breakdown(ts: Mapping[str, int | None]) -> dict[str, Any]:
    """Phases (ms) from the t-points; missing points merge phases and are named."""
    present = [p for p in POINTS if ts.get(p) is not None]
    unobserved = [p for p in POINTS if ts.get(p) is None]
    phases: dict[str, float] = {}
    # Walk the present points in order: each interval is one phase or a merge of several.
    for a, b in itertools.pairwise(present):
        names = [n for n, (x, _y) in PHASES.items() if POINTS.index(a) <= POINTS.index(x)]
        names = [n for n in names if POINTS.index(PHASES[n][1]) <= POINTS.index(b)]
        phases["+".join(names)] = _ms(ts[a], ts[b])  # type: ignore[assignment]
    e2e = _ms(ts.get("t0"), ts.get("t10"))
    total = sum(phases.values())
    residual = None if e2e is None else e2e - total
    out: dict[str, Any] = dict(phases)
    out["e2e"] = e2e
    out["phase_sum"] = total
    out["residual_ms"] = residual
    out["residual_frac"] = (abs(residual) / e2e) if residual is not None and e2e else None
    out["negative_phases"] = [n for n, v in phases.items() if v < 0]
    out["unobserved"] = unobserved
    out["ttft"] = _ms(ts.get("t0"), ts.get("t9"))
    out["transfer_total"] = _ms(ts.get("t3"), ts.get("t7"))
    return out


def breakdown_complete(bd: Mapping[str, Any]) -> bool:
    """The design's criterion 1 for one record: residual under 5% and every phase observed."""
    frac = bd.get("residual_frac")
    return frac is not None and frac < RESIDUAL_LIMIT and not bd.get("unobserved")


# ---- engine events -> t-points ------------------------------------------------------------


def events_for(events: Iterable[Mapping[str, Any]], tag: str) -> list[Mapping[str, Any]]:
    """Events of one request: vLLM's engine ids embed the client's x-request-id (`tag`)."""
    return [e for e in events if e.get("req") and tag in str(e["req"])]


def _first(evs: Sequence[Mapping[str, Any]], ev: str, engine: str | None = None) -> Any:
    for e in evs:
        if e["ev"] == ev and (engine is None or e.get("engine") == engine):
            return e
    return None


def engine_points(
    p_events: Sequence[Mapping[str, Any]],
    d_events: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, int | None], dict[str, Any]]:
    """t2..t8 (except tp) from P's and D's events of one request, and what D saw."""
    get = lambda e, k="t_ns": None if e is None else e.get(k)  # noqa: E731
    posted = _first(d_events, "read_posted")
    ts = {
        "t2": get(_first(p_events, "scheduled")),
        "t3": get(_first(p_events, "finished")),
        "t4": get(_first(d_events, "seen")),
        "t5": get(posted, "call_t_ns") or get(posted),
        "t6": get(_first(d_events, "read_done")),
        "t7": get(_first(d_events, "recv_done")),
        "t8": get(_first(d_events, "scheduled")),
    }
    seen = _first(d_events, "seen") or {}
    done = _first(d_events, "read_done") or {}
    load = _first(d_events, "load_start") or {}
    alloc = _first(d_events, "alloc") or {}
    detail = {
        "d_local_hit_tokens": seen.get("local_hit_tokens"),
        "d_external_tokens": seen.get("external_tokens"),
        "d_alloc_blocks": alloc.get("blocks"),
        "blocks": load.get("local_blocks"),
        "remote_blocks": load.get("remote_blocks"),
        "bytes": done.get("bytes"),
        "ops": done.get("ops"),
        "descriptors": done.get("descriptors"),
        "nixl_post_ms": None if done.get("nixl_post_us") is None else done["nixl_post_us"] / 1e3,
        "nixl_xfer_ms": None if done.get("nixl_xfer_us") is None else done["nixl_xfer_us"] / 1e3,
        "failed": done.get("failed"),
        "p_prompt_tokens": (_first(p_events, "finished") or {}).get("prompt_tokens"),
        "p_scheduled_tokens": (_first(p_events, "scheduled") or {}).get("tokens"),
    }
    return ts, detail


def transfer_detail(detail: Mapping[str, Any], layers: int | None, bd: Mapping[str, Any]) -> dict:
    """Bytes, ops, blocks, layers and effective bandwidth (bytes over the transfer phase)."""
    out = dict(detail)
    out["layers"] = layers
    t_ms = bd.get("transfer")
    b = detail.get("bytes")
    out["effective_bw_gbps"] = (b * 8 / (t_ms * 1e6)) if b and t_ms and t_ms > 0 else None
    x = detail.get("nixl_xfer_ms")
    out["nixl_bw_gbps"] = (b * 8 / (x * 1e6)) if b and x and x > 0 else None
    return out


# ---- the transfer cost model --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinearFit:
    alpha: float  # intercept (ms)
    beta: float  # slope (ms per byte)
    r2: float
    n: int

    def predict(self, x: float) -> float:
        return self.alpha + self.beta * x


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Least squares y = alpha + beta x with R^2 (NaN R^2 when y does not vary)."""
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True)]
    pairs = [(x, y) for x, y in pairs if math.isfinite(x) and math.isfinite(y)]
    n = len(pairs)
    if n < 2:
        raise ValueError(f"a linear fit needs 2 points or more, got {n}")
    mx = sum(x for x, _ in pairs) / n
    my = sum(y for _, y in pairs) / n
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    if sxx == 0:
        raise ValueError("a linear fit needs at least two distinct x values")
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    beta = sxy / sxx
    alpha = my - beta * mx
    ss_tot = sum((y - my) ** 2 for _, y in pairs)
    ss_res = sum((y - alpha - beta * x) ** 2 for x, y in pairs)
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return LinearFit(alpha, beta, r2, n)
