"""Study 3, elastic offload against load (seed 000's design).

Elastic offloads a HEAVY prefill to a peer only when the peer has room and the session's
instance is decoding. The design expects most HEAVY requests offloaded at low load, about half
at medium load and almost none when the fleet is saturated. Each load level compares elastic
with its two bounds: always offload every HEAVY prefill, never offload.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    diff_cell,
    finding_text,
    ms,
    pct,
)
from agentic_kvc.analysis.studies.common import study, variant_summary
from agentic_kvc.analysis.studies.figures import lines

NAME = "elastic_load"
TITLE = "3. Elastic offload against load"
QUESTION = (
    "As load grows from idle to saturated, what share of HEAVY requests does elastic offload "
    "move to a peer, for which reasons, and how does its TTFT compare with always and never "
    "offloading? Does the design's expectation (most offloaded at low load, about half at "
    "medium, almost none saturated) hold?"
)
LOAD = "session_rate_per_s"
ELASTIC, ALWAYS, NEVER = "elastic", "always offload", "never offload"
REASONS = ("p_idle_d_busy", "p_overloaded", "d_idle")


def offload_shares(df: pl.DataFrame) -> pl.DataFrame:
    """Per variant and load: HEAVY requests, the share offloaded, and each reason's share."""
    heavy = df.filter(pl.col("route_class").str.starts_with("HEAVY"))
    aggs = [
        pl.len().alias("heavy"),
        (pl.col("route_class") == "HEAVY_P2P").mean().alias("offloaded"),
        *[(pl.col("reason") == r).mean().alias(r) for r in REASONS],
    ]
    below = df.group_by("variant", LOAD).agg(
        (pl.col("reason") == "below_threshold").mean().alias("below_threshold")
    )
    return (
        heavy.group_by("variant", LOAD)
        .agg(aggs)
        .join(below, on=["variant", LOAD])
        .sort("variant", LOAD)
    )


def expectation(shares: list[tuple[float, float]]) -> str:
    """Judge the design's expectation from (load, offloaded share) sorted by load."""
    if len(shares) < 3:
        return "too few load levels to judge the design's expectation"
    low, high = shares[0][1], shares[-1][1]
    mid = [s for _, s in shares[1:-1]]
    checks = [low > 0.5, any(0.25 <= m <= 0.75 for m in mid), high < 0.1]
    said = (
        f"offloaded {pct(low, 0)} of HEAVY requests at the lowest load, "
        f"{', '.join(pct(m, 0) for m in mid)} in between and {pct(high, 0)} at the highest"
    )
    if all(checks):
        return f"elastic {said}: the design's expectation holds"
    failed = [
        w
        for w, ok in zip(
            ("most at low load", "about half at medium load", "almost none saturated"),
            checks,
            strict=True,
        )
        if not ok
    ]
    return f"elastic {said}: the design's expectation does not hold ({'; '.join(failed)} fails)"


@study(NAME, TITLE, QUESTION, needs=(LOAD,))
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    df = df.with_columns(pl.col(LOAD).cast(pl.Float64))
    loads = sorted(set(df[LOAD]))
    shares = offload_shares(df)
    lat = variant_summary(df, ("variant", LOAD))
    rows, sig = [], []
    for load in loads:
        at = df.filter(pl.col(LOAD) == load)
        vs_always = compare(at, ALWAYS, ELASTIC, "ttft_p90")
        vs_never = compare(at, NEVER, ELASTIC, "ttft_p90")
        sig.append((load, vs_always, vs_never))
        for v in (ELASTIC, ALWAYS, NEVER):
            sh = shares.filter((pl.col("variant") == v) & (pl.col(LOAD) == load))
            lr = lat.filter((pl.col("variant") == v) & (pl.col(LOAD) == load))
            if lr.is_empty():
                continue
            sh0 = sh.row(0, named=True) if not sh.is_empty() else {}
            l0 = lr.row(0, named=True)
            rows.append(
                [
                    f"{load:g}",
                    v,
                    str(sh0.get("heavy", 0)),
                    pct(sh0.get("offloaded")),
                    *(pct(sh0.get(r)) if v == ELASTIC else "" for r in REASONS),
                    ms(l0["ttft_s_p50"]),
                    ms(l0["ttft_s_p90"]),
                    diff_cell(vs_always) if v == ELASTIC else "",
                    diff_cell(vs_never) if v == ELASTIC else "",
                ]
            )
    s.table(
        "Load: sessions started per second (200 sessions). Shares are of HEAVY requests "
        "(>= 20k new tokens); reasons are elastic's, for its HEAVY requests. Differences: "
        "elastic's TTFT p90 paired against each bound at the same load (95% interval).",
        [
            "load",
            "variant",
            "HEAVY",
            "offloaded",
            *REASONS,
            "TTFT p50 (ms)",
            "TTFT p90 (ms)",
            "elastic vs always",
            "elastic vs never",
        ],
        rows,
    )
    el = shares.filter(pl.col("variant") == ELASTIC).sort(LOAD)
    curve = [(r[LOAD], r["offloaded"]) for r in el.iter_rows(named=True)]
    if curve:
        fig = lines(
            [c[0] for c in curve],
            {"offloaded": [c[1] for c in curve], **{r: el[r].to_list() for r in REASONS}},
            figures / "offload_vs_load.png",
            "sessions/s",
            "share of HEAVY requests",
            "Elastic: HEAVY requests offloaded, and why, against load",
            logx=True,
        )
        s.figure(fig, "Share of HEAVY requests elastic offloads, and its reasons, by load.", root)
    judged = expectation(curve)
    wins = [f"{load:g}/s: {diff_cell(a)} vs always, {diff_cell(n)} vs never" for load, a, n in sig]
    s.answer = (
        judged[0].upper()
        + judged[1:]
        + ". TTFT p90 of elastic against its bounds: "
        + "; ".join(wins)
        + "."
    )
    for load, a, n in sig:
        if a is not None and a.significant:
            s.findings.append(
                finding_text(a, f"elastic vs always offload at {load:g} sessions/s, TTFT p90")
            )
        if n is not None and n.significant:
            s.findings.append(
                finding_text(n, f"elastic vs never offload at {load:g} sessions/s, TTFT p90")
            )
    s.findings.insert(0, judged[0].upper() + judged[1:])
    return s
