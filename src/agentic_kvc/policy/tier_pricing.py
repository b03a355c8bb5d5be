"""Pricing a reload from a KV tier below HBM by its time (issue 29, item 4; `predicted_ttft`).

Peers credit a lower-tier hit with a fixed fraction of an HBM hit (Dynamo 0.75 / 0.25, llm-d
0.8). A reload's worth depends on what it costs where it would run: its bytes over that
instance's link, behind what the link already carries, against the recompute it saves and the
queue it would wait in anyway. Per candidate i with `TierHits` (hbm, host, disk):

    host_s_i = host_latency + (Qhost_i + host_i) * B / host_h2d      (0 when host_i == 0)
    disk_s_i = disk_latency + (Qdisk_i + disk_i) * B / disk_read     (0 when disk_i == 0)
    reload_i = max(host_s_i, disk_s_i)

B = KV bytes per token; Q = the reload tokens the router has routed to i and not yet seen
reach their first token (`InstanceView.pending_*_reload_tokens`: the link's queue as the
router can know it). Both loads start at admission, each on its own link, and the request
waits for the later one; meanwhile the engine steps its other requests (vLLM parks it in
WAITING_FOR_REMOTE_KVS and schedules it again, in its place, once the load is done: docs/
kv_tiers.md), so the reload delays the request only by what it outlasts the queue ahead:

    ttft_i = predict_ttft_s(i, u_i, h_i) + max(reload_i - queue_i, 0)

with h_i = hbm + host + disk (everything held is context, nothing reloaded is recomputed),
u_i = input - h_i and queue_i the queued prefill ahead (`predict_ttft_s` of a 0-token prompt).
No credit is fixed: a host hit worth reloading on an idle link is worth less behind a long
reload queue, or on an instance whose queue the reload would not hide.

The link numbers are parameters: None takes the hardware profile's (`profiles/hardware.py`
`tier_links`, what the simulator's tiers default to); a run that sets its own in
`fleet.kv_tiers` passes the same to the policy (`tier_params_from_fleet`); the proxy passes
the engines' measured numbers the same way (policy.params).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from agentic_kvc.policy.base import InstanceView, TierHits

if TYPE_CHECKING:
    from agentic_kvc.config import KVTiersConfig


@dataclass(frozen=True, slots=True)
class TierLinkSpeeds:
    """The links a reload crosses, bytes/s and seconds per transfer."""

    host_bytes_per_s: float
    host_latency_s: float
    disk_bytes_per_s: float
    disk_latency_s: float


@lru_cache(maxsize=32)
def link_speeds(
    hardware: str,
    host_h2d_gbps: float | None,
    host_latency_s: float | None,
    disk_read_gbps: float | None,
    disk_latency_s: float | None,
) -> TierLinkSpeeds:
    """The given link numbers (GB/s = 1e9 bytes/s), each None taken from `hardware`'s
    profile (asked only when one is None)."""
    if None in (host_h2d_gbps, host_latency_s, disk_read_gbps, disk_latency_s):
        from agentic_kvc.profiles.hardware import tier_links  # the tables load lazily

        links = tier_links(hardware)
        host_h2d_gbps = links.host_h2d_gbps if host_h2d_gbps is None else host_h2d_gbps
        host_latency_s = links.host_latency_s if host_latency_s is None else host_latency_s
        disk_read_gbps = links.disk_read_gbps if disk_read_gbps is None else disk_read_gbps
        disk_latency_s = links.disk_latency_s if disk_latency_s is None else disk_latency_s
    return TierLinkSpeeds(
        host_h2d_gbps * 1e9,  # type: ignore[operator]
        float(host_latency_s),  # type: ignore[arg-type]
        disk_read_gbps * 1e9,  # type: ignore[operator]
        float(disk_latency_s),  # type: ignore[arg-type]
    )


def reload_s(
    inst: InstanceView, hits: TierHits, kv_bytes_per_token: float, links: TierLinkSpeeds
) -> float:
    """`reload_i` of the module docstring: when the later of the two loads would land."""
    host = disk = 0.0
    if hits.host:
        queued = inst.pending_host_reload_tokens + hits.host
        host = links.host_latency_s + queued * kv_bytes_per_token / links.host_bytes_per_s
    if hits.disk:
        queued = inst.pending_disk_reload_tokens + hits.disk
        disk = links.disk_latency_s + queued * kv_bytes_per_token / links.disk_bytes_per_s
    return host if host > disk else disk


def reload_delays(
    candidates: Sequence[InstanceView],
    tiers: Sequence[TierHits],
    queue_s: Sequence[float],
    kv_bytes_per_token: float,
    links: TierLinkSpeeds,
) -> dict[int, float]:
    """Per candidate index: max(reload_i - queue_i, 0), `queue_s` in candidate order."""
    out: dict[int, float] = {}
    for inst, q in zip(candidates, queue_s, strict=True):
        t = tiers[inst.index]
        r = reload_s(inst, t, kv_bytes_per_token, links) if (t.host or t.disk) else 0.0
        out[inst.index] = r - q if r > q else 0.0
    return out


def tier_params_from_fleet(kv_tiers: KVTiersConfig) -> dict[str, Any]:
    """`predicted_ttft` parameters naming the link numbers a run's `fleet.kv_tiers` sets
    (those it leaves None the policy takes from the same hardware profile as the simulator)."""
    out: dict[str, Any] = {}
    for name in ("host_h2d_gbps", "host_latency_s", "disk_read_gbps", "disk_latency_s"):
        value = getattr(kv_tiers, name)
        if value is not None:
            out[f"tier_{name}"] = value
    return out
