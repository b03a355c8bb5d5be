"""Summaries of the workbench's inputs: the replay client against aiperf, and reading the
Mooncake trace."""

from __future__ import annotations

from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    Fig,
    field_at,
    num,
    pct,
    summariser,
    tolerance_pct,
    verdict_of,
)


@summariser("replay_crosscheck", "akvc replay against NVIDIA aiperf on the same vLLM instance")
def _replay_crosscheck(doc: dict[str, Any]) -> list[Fig]:
    tol = float(
        doc.get("agreement", {}).get("tolerance", doc.get("parameters", {}).get("tolerance", 0.10))
    )
    out = []
    for metric in ("ttft", "e2e"):
        ours = float(field_at(doc, "results", "akvc", metric, "p50_ms"))
        theirs = float(field_at(doc, "results", "aiperf", metric, "p50_ms"))
        rel = abs(ours - theirs) / theirs
        out.append(
            Fig(
                f"{metric.upper()} p50, akvc vs aiperf",
                f"{num(ours)} vs {num(theirs)} ms ({pct(rel)} apart)",
                f"within {tolerance_pct(tol)}",
                verdict_of(rel <= tol),
            )
        )
    return out


@summariser("workload_load", "reading the Mooncake conversation trace into sessions")
def _workload_load(doc: dict[str, Any]) -> list[Fig]:
    goal = float(doc.get("goal_s", 5.0))
    median = float(field_at(doc, "read_and_rebuild", "median_s"))
    out = [
        Fig(
            "read + session rebuild, median",
            f"{num(median)} s ({int(field_at(doc, 'requests')):,} requests, "
            f"{int(field_at(doc, 'sessions')):,} sessions)",
            f"< {num(goal)} s",
            verdict_of(median < goal),
        )
    ]
    shares = doc.get("default_preset_shares")
    if shares:
        keys = ("first_turn_share", "high_hit_share", "heavy_first_turn_share")
        out.append(
            Fig(
                "default preset: cold first turns / >90%-hit turns / HEAVY that are first turns "
                "(the seeds' analysis: about 55% / 22% / 92%)",
                " / ".join(pct(float(field_at(shares, k))) for k in keys),
            )
        )
    return out
