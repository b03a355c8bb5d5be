"""Study 1, the routing design's evolution: round-robin -> LMetric -> additive -> unified."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    diff_cell,
    direction,
    finding_text,
    ms,
    num,
)
from agentic_kvc.analysis.studies.common import (
    latency_cells,
    latency_header,
    ordered,
    study,
    variant_summary,
)
from agentic_kvc.analysis.studies.figures import diff_chart

NAME = "evolution"
TITLE = "1. Evolution of the routing design"
QUESTION = (
    "How does each step of the design log (LMetric, the additive time-cost model, the unified "
    "hybrid with seed 003's overload gate, then with this project's cost gate, with and without "
    "its request ceiling) change TTFT p90, E2E p90 and the balance of prompt tokens over "
    "instances, against round-robin?"
)
BASELINE = "round_robin"
ORDER = (
    "round_robin",
    "lmetric",
    "additive",
    "unified (seed gate)",
    "unified (no ceiling)",
    "unified",
)
METRICS = ("ttft_p90", "e2e_p90", "token_max_over_min")
CEILING_METRIC = "unified's TTFT p90"


@study(NAME, TITLE, QUESTION)
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    summary = {r["variant"]: r for r in variant_summary(df).iter_rows(named=True)}
    variants = ordered(list(summary), ORDER)
    rows, cmp = [], {}
    for v in variants:
        r = summary[v]
        c = {m: compare(df, BASELINE, v, m) if v != BASELINE else None for m in METRICS}
        cmp[v] = c
        rows.append(
            [
                v,
                str(r["requests"]),
                *latency_cells(r, c["ttft_p90"], c["e2e_p90"]),
                num(r["token_max_over_min"]),
                diff_cell(c["token_max_over_min"]),
            ]
        )
    s.table(
        "Seeds pooled; differences are paired against round-robin over the same seeds, with "
        "95% bootstrap intervals (seeds, then requests); n.s.: the interval contains 0. "
        "Token max/min: prompt tokens computed by the busiest instance over the idlest "
        "(mean over runs).",
        [
            "variant",
            "requests",
            *latency_header("vs RR"),
            "tok max/min",
            "vs RR",
        ],
        rows,
    )
    # The ceiling: unified with vs without it, paired directly.
    ceiling = compare(df, "unified (no ceiling)", "unified", "ttft_p90")
    ceiling_e2e = compare(df, "unified (no ceiling)", "unified", "e2e_p90")
    gate = compare(df, "unified (seed gate)", "unified", "ttft_p90")
    gate_e2e = compare(df, "unified (seed gate)", "unified", "e2e_p90")
    steps = [
        ("the request ceiling (unified vs unified without it)", ceiling, ceiling_e2e),
        ("the cost gate (unified vs unified with seed 003's gate)", gate, gate_e2e),
    ]
    if any(c is not None for _, c, _ in steps):
        s.table(
            "Single steps, each paired directly against the variant without it:",
            ["step", "TTFT p90", "E2E p90"],
            [[what, diff_cell(t), diff_cell(e)] for what, t, e in steps if t is not None],
        )
    fig = diff_chart(
        [(f"{v} vs round_robin", cmp[v]["ttft_p90"]) for v in variants if v != BASELINE]
        + [("request ceiling (vs without)", ceiling), ("cost gate (vs seed 003's)", gate)],
        figures / "ttft_p90_steps.svg",
        "TTFT p90 of each step, paired (95% interval; hollow: identical)",
        "TTFT p90 difference (%)",
    )
    if fig is not None:
        s.figure(fig, "TTFT p90 of each step against round-robin, and of each single step.", root)
    best = min(
        (v for v in variants if v != BASELINE), key=lambda v: summary[v]["ttft_s_p90"], default=None
    )
    if best is None or cmp[best]["ttft_p90"] is None:
        s.answer = "Only one variant has runs, so the data do not decide it."
        return s
    s.answer = (
        f"Of the design's steps, {best} has the lowest TTFT p90 ({ms(summary[best]['ttft_s_p90'])}"
        f" ms); against round-robin it {direction(cmp[best]['ttft_p90'], 'TTFT p90')} and "
        f"{direction(cmp[best]['e2e_p90'], 'E2E p90')}"
        + (f"; the request ceiling {direction(ceiling, CEILING_METRIC)}" if ceiling else "")
        + (
            f"; the cost gate {direction(gate, CEILING_METRIC)} against seed 003's gate"
            if gate
            else ""
        )
        + "."
    )
    for v in ("lmetric", "unified"):  # the two steps the design kept
        if v in cmp and cmp[v]["ttft_p90"] is not None:
            s.findings.append(finding_text(cmp[v]["ttft_p90"], f"{v} vs round_robin, TTFT p90"))
    if ceiling is not None:
        s.findings.append(finding_text(ceiling, "unified's request ceiling, TTFT p90"))
    if gate is not None:
        s.findings.append(finding_text(gate, "unified's cost gate vs seed 003's gate, TTFT p90"))
        s.findings.append(finding_text(gate_e2e, "unified's cost gate vs seed 003's gate, E2E p90"))
    return s
