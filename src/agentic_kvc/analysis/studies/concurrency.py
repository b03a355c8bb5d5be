"""Study 6, the concurrency track: at most 64 or 128 sessions in flight.

More sessions arrive than the fleet serves; the replayer admits at most N sessions at a time
(a queue in front of the router, as an agent platform's concurrency limit would). A policy's
advantage can shrink or grow with N: more sessions in flight means more contexts competing for
each instance's KV cache.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    direction,
    finding_text,
    pct,
)
from agentic_kvc.analysis.studies.common import (
    latency_cells,
    latency_header,
    ordered,
    study,
    variant_summary,
)
from agentic_kvc.analysis.studies.figures import diff_chart

NAME = "concurrency"
TITLE = "6. Concurrency track: 64 and 128 sessions in flight"
QUESTION = (
    "With at most 64 or 128 agent sessions in flight, how do the policies compare on TTFT and "
    "E2E against round-robin, and does the ranking change with the limit?"
)
CAP = "max_inflight_sessions"
BASELINE = "round_robin"
ORDER = ("round_robin", "sglang_cache_aware", "lmetric", "unified")


@study(NAME, TITLE, QUESTION, needs=(CAP,))
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    df = df.with_columns(pl.col(CAP).cast(pl.Int64))
    summ = variant_summary(df, ("policy", CAP))
    rows, best, chart = [], {}, []
    for cap in sorted(set(df[CAP])):
        at = df.filter(pl.col(CAP) == cap)
        sc = summ.filter(pl.col(CAP) == cap)
        by = {r["policy"]: r for r in sc.iter_rows(named=True)}
        best[cap] = min(by, key=lambda p: by[p]["ttft_s_p90"])
        for p in ordered(list(by), ORDER):
            r = by[p]
            c = compare(at, BASELINE, p, "ttft_p90", by="policy") if p != BASELINE else None
            c_e = compare(at, BASELINE, p, "e2e_p90", by="policy") if p != BASELINE else None
            if c is not None:
                chart.append((f"{p}, {cap} in flight", c))
            rows.append(
                [
                    str(cap),
                    p,
                    str(r["requests"]),
                    *latency_cells(r, c, c_e),
                    pct(r["prefix_hit_rate"]),
                ]
            )
            if p == "unified" and c is not None:
                s.findings.append(
                    finding_text(c, f"unified vs round_robin at {cap} in flight, TTFT p90")
                )
    s.table(
        "300 sessions arriving at 2/s; seeds pooled; differences paired against round-robin at "
        "the same limit (95% interval).",
        [
            "in flight",
            "policy",
            "requests",
            *latency_header("vs RR"),
            "hit rate",
        ],
        rows,
    )
    fig = diff_chart(
        chart,
        figures / "ttft_p90_vs_rr.svg",
        "TTFT p90 against round-robin at each limit (95% interval)",
        "TTFT p90 difference (%)",
    )
    if fig is not None:
        s.figure(fig, "Each policy's TTFT p90 against round-robin, per in-flight limit.", root)
    caps = sorted(best)
    parts = []
    for cap in caps:
        at = df.filter(pl.col(CAP) == cap)
        c = (
            compare(at, BASELINE, best[cap], "ttft_p90", by="policy")
            if best[cap] != BASELINE
            else None
        )
        parts.append(
            f"at {cap} in flight {best[cap]} has the lowest TTFT p90"
            + (f" (it {direction(c, 'TTFT p90')} against round-robin)" if c is not None else "")
        )
    same = len(set(best.values())) == 1
    text = (
        "; ".join(parts)
        + ". The best policy "
        + ("is the same at both limits." if same else "changes with the limit.")
    )
    s.answer = text[0].upper() + text[1:]
    return s
