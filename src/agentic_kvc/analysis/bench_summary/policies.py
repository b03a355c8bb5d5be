"""Summaries of the policy sweeps: our policies against the best peer on every workload, and
predicted_ttft with split candidates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    Fig,
    above_zero,
    below_zero,
    field_at,
    paired_cell,
    pct,
    summariser,
    verdict_of,
)

ROBUST_METRICS = ("ttft_p90", "e2e_p90")  # what the robustness sweep pairs
# The robustness sweep's predicted_ttft with its step costs fitted online from a generic prior
# (benchmarks/policy_robustness.py OURS): the form a fleet without a profile runs.
ROBUST_ONLINE = "predicted_ttft:cost_model=online,online_prior=generic"


def robust_metric(m: str) -> str:
    """'ttft_p90' -> 'TTFT p90'."""
    name, _, q = m.partition("_")
    return f"{name.upper()} {q}"


def robust_worse(rows: Sequence[Mapping[str, Any]], policy: str) -> list[tuple[str, list[str]]]:
    """The robustness sweep's workloads where `policy` is significantly worse than the best
    peer (the interval above 0), each with the metrics where it is, by name."""
    out = []
    for r in rows:
        worse = [m for m in ROBUST_METRICS if above_zero(field_at(r, policy, m))]
        if worse:
            out.append((str(r["scenario"]), worse))
    return sorted(out)


def robust_lead(rows: Sequence[Mapping[str, Any]], policy: str) -> Mapping[str, Any] | None:
    """The workload of `policy`'s largest significant TTFT p90 lead over the best peer among
    those where its E2E p90 is not significantly worse (None without one)."""
    leads = [
        r
        for r in rows
        if below_zero(field_at(r, policy, "ttft_p90"))
        and not above_zero(field_at(r, policy, "e2e_p90"))
    ]
    return min(leads, key=lambda r: float(r[policy]["ttft_p90"]["rel_diff"]), default=None)


def robust_vs_default(
    rows: Sequence[Mapping[str, Any]], variant: str
) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(workload, metric, paired row) where the variant differs significantly from its
    policy's default form (each scenario's `vs_default`; the interval excludes 0)."""
    out = []
    for r in rows:
        for m in ROBUST_METRICS:
            c = field_at(r, "vs_default", variant, m)
            if above_zero(c) or below_zero(c):
                out.append((str(r["scenario"]), m, c))
    return out


@summariser("policy_robustness", "our policies against the best peer on every workload (sim)")
def _policy_robustness(doc: dict[str, Any]) -> list[Fig]:
    scenarios = field_at(doc, "scenarios")
    out = []
    for o in field_at(doc, "ours"):
        rows = [r for r in scenarios if o in r]
        worse = robust_worse(rows, o)
        listed = ", ".join(f"{n} ({', '.join(map(robust_metric, ms))})" for n, ms in worse)
        out.append(
            Fig(
                f"{o}: workloads significantly worse than the best peer (TTFT or E2E p90)",
                f"{len(worse)} of {len(rows)}" + (f": {listed}" if worse else ""),
                "none (issue 18)",
                verdict_of(bool(rows) and not worse),
            )
        )
        best = robust_lead(rows, o)
        lead = None if best is None else float(best[o]["ttft_p90"]["rel_diff"])
        out.append(
            Fig(
                f"{o}: largest significant TTFT p90 lead, E2E p90 not significantly worse",
                "none" if best is None else f"{pct(lead, sign=True)} ({best['scenario']})",
                ">= 20% lower on one workload (issue 18)",
                verdict_of(lead is not None and lead <= -0.2),
            )
        )
        paired = [r for r in rows if o in r.get("vs_default", {})]
        if paired:
            diff = robust_vs_default(paired, o)
            listed = "; ".join(f"{n} {robust_metric(m)} {paired_cell(c)}" for n, m, c in diff)
            out.append(
                Fig(
                    f"{o} vs {o.partition(':')[0]} (its default form): workloads where they "
                    "differ significantly (TTFT or E2E p90)",
                    f"{len({n for n, _, _ in diff})} of {len(paired)}"
                    + (f": {listed}" if diff else ""),
                )
            )
    return out


@summariser("policy_split", "predicted_ttft with split candidates (sim, issue 18 item 4)")
def _policy_split(doc: dict[str, Any]) -> list[Fig]:
    rows = field_at(doc, "scenarios")
    out = []
    # (what split is paired against, where each scenario keeps that pair's intervals)
    against = (
        ("colocate-only predicted_ttft", ("split_vs_colo",), "none (else split stays off)"),
        ("the best peer", ("vs_peer", "predicted_ttft:split=true"), "none (issue 18)"),
    )
    for label, path, goal in against:
        worse = sorted(
            str(r["scenario"])
            for r in rows
            if any(float(field_at(r, *path, m, "ci_low")) > 0 for m in ("ttft_p90", "e2e_p90"))
        )
        better = sorted(
            (float(field_at(r, *path, "ttft_p90", "rel_diff")), str(r["scenario"]))
            for r in rows
            if float(field_at(r, *path, "ttft_p90", "ci_high")) < 0
        )
        out.append(
            Fig(
                f"split vs {label}: workloads significantly worse (TTFT or E2E p90)",
                f"{len(worse)} of {len(rows)}" + (f": {', '.join(worse)}" if worse else ""),
                goal,
                verdict_of(bool(rows) and not worse),
            )
        )
        out.append(
            Fig(
                f"split vs {label}: significantly lower TTFT p90",
                ", ".join(f"{b} {pct(v, sign=True)}" for v, b in better) or "none",
            )
        )
    return out
