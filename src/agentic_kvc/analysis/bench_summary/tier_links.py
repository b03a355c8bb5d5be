"""Summaries of the GPU measurements behind the simulator's tier links: host <-> device copies
of KV blocks, and whether concurrent copies queue."""

from __future__ import annotations

from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    Fig,
    field_at,
    num,
    summariser,
)


@summariser("kv_link_copy", "host <-> device copies of KV blocks on a GPU (the tier links)")
def _kv_link_copy(doc: dict[str, Any]) -> list[Fig]:
    """Per memory and direction, the fitted latency + bandwidth of one contiguous copy."""
    out = [Fig("device", f"{field_at(doc, 'device')} (torch {field_at(doc, 'torch')})")]
    for f in field_at(doc, "fits"):
        if f.get("layout", "contiguous") != "contiguous":
            continue
        out.append(
            Fig(
                f"{field_at(f, 'memory')} {field_at(f, 'direction')}: latency + bytes / bandwidth",
                f"{num(float(field_at(f, 'latency_s')) * 1e6)} us + "
                f"{num(float(field_at(f, 'gb_per_s')))} GB/s",
            )
        )
    return out


@summariser(
    "kv_link_contention", "do KV reloads queue on the host link, and do they slow the steps?"
)
def _kv_link_contention(doc: dict[str, Any]) -> list[Fig]:
    """Over every run and size: two host->device copies started together (when each ends,
    against one alone), a copy each way at once, and a matmul loop beside copies."""
    runs = field_at(doc, "runs")
    sizes = [r for run in runs for r in field_at(run, "sizes")]
    first = [float(field_at(r, "two_h2d_first_over_alone")) for r in sizes]
    total = [float(field_at(r, "two_h2d_total_over_alone")) for r in sizes]
    duplex = [
        max(
            float(field_at(r, "duplex_h2d_over_alone")), float(field_at(r, "duplex_d2h_over_alone"))
        )
        for r in sizes
    ]
    loop = [float(field_at(run, "compute", "loop_slowdown")) for run in runs]
    copies = [float(field_at(run, "compute", "copies_slowdown")) for run in runs]

    def span(xs: list[float]) -> str:
        return f"{num(min(xs))}-{num(max(xs))}x"

    return [
        Fig(
            "device",
            f"{field_at(doc, 'device')}, {len(runs)} runs x {len(sizes) // len(runs)} sizes",
        ),
        Fig(
            "two host->device copies at once: first / second ends (x one alone)",
            f"{span(first)} / {span(total)}",
        ),
        Fig("a copy each way at once: the slower (x alone)", span(duplex)),
        Fig(
            "bf16 matmul loop beside copies: loop / copies slowdown",
            f"{span(loop)} / {span(copies)}",
        ),
    ]
