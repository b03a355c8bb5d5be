"""Study 2, adaptive prefill offload, experiments A-D (seed 002's design).

A: combined instances + LMetric; B: adaptive v1 (HEAVY to the least decode load) at T = 20k;
C: B's threshold ablation (T = 10k, 40k); D: adaptive v2 (HEAVY prefilled elsewhere, KV moved).
Per class, every variant is judged on the same requests: a request's class is the one the
design's classifier gave it in B (T = 20k, judged from the prefill instance's cache), so a
variant with another threshold is not compared on a different set of requests.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Expectation,
    Section,
    StudyData,
    compare,
    diff_cell,
    direction,
    finding_text,
    ms,
    pct,
    sec,
)
from agentic_kvc.analysis.studies.common import (
    latency_cells,
    latency_header,
    ordered,
    study,
    variant_summary,
)
from agentic_kvc.analysis.studies.figures import kv_usage_over_time

NAME = "adaptive"
TITLE = "2. Adaptive prefill offload (experiments A-D)"
QUESTION = (
    "Does classifying requests as WARM / MEDIUM / HEAVY and moving HEAVY prefills (v1: to the "
    "instance with the least decode; v2: to another instance with a KV transfer) improve on "
    "combined instances with LMetric (A), per class, and which threshold T works best?"
)
A, B, D = "A: combined + lmetric", "B: adaptive v1 T=20k", "D: adaptive v2 (KV transfer)"
ORDER = (A, B, "C: adaptive v1 T=10k", "C: adaptive v1 T=40k", D)
CLASSES = ("WARM", "MEDIUM", "HEAVY")


def with_design_class(df: pl.DataFrame) -> pl.DataFrame:
    """Add `design_class`: B's class of the same request (same replicate and request id),
    else the run's own class; `_COLO` / `_P2P` suffixes dropped."""
    base = pl.col("route_class").fill_null("").str.replace(r"_(COLO|P2P)$", "")
    own = df.with_columns(base.alias("own_class"))
    ref = (
        own.filter(pl.col("variant") == B)
        .select("replicate", "request_id", pl.col("own_class").alias("design_class"))
        .unique(["replicate", "request_id"])
    )
    out = own.join(ref, on=["replicate", "request_id"], how="left")
    return out.with_columns(pl.col("design_class").fill_null(pl.col("own_class")))


EXPECTED = (
    "HEAVY requests faster under v1 (routed away from the decode they would block) and "
    "fastest under v2 (prefilled on another instance); WARM requests' TTFT the same in all"
)
SOURCE = "seeds/002, 5. Expected Outcomes"
LINEAR = "linear"  # the tables' quantile (analysis.tables), so the rows match them


def phases(df: pl.DataFrame) -> pl.DataFrame:
    """Per design class and variant: TTFT p90, the p90 of the time from arrival to the end of
    the prefill (queue + prefill) and after it (KV transfer and the wait for the decode
    instance; 0 when both run on one instance), and the prefix hit rate."""
    ok = df.filter(pl.col("error").is_null() | (pl.col("error") == ""))
    return ok.group_by("design_class", "variant").agg(
        pl.col("ttft_s").quantile(0.9, LINEAR).alias("ttft_p90"),
        (pl.col("t_prefill_done") - pl.col("t_proxy_recv"))
        .quantile(0.9, LINEAR)
        .alias("to_prefill_p90"),
        (pl.col("t_first_token") - pl.col("t_prefill_done"))
        .quantile(0.9, LINEAR)
        .alias("after_p90"),
        (pl.col("cached_tokens").sum() / pl.col("input_tokens").sum()).alias("hit_rate"),
    )


def faced(df: pl.DataFrame, heavy: dict, warm: dict) -> Expectation | None:
    """Design 002's expected outcomes against the per-class differences of B and D, with the
    rows (HEAVY and WARM, for A, B and D) whose phases and hit rates say why."""
    if heavy.get(B) is None or heavy.get(D) is None or warm.get(B) is None:
        return None
    holds = (
        heavy[B].significant
        and heavy[B].rel_diff < 0
        and heavy[D].significant
        and heavy[D].rel_diff < 0
        and not warm[B].significant
    )
    outcome = (
        f"against A, HEAVY TTFT p90 under B (v1) {diff_cell(heavy[B])}, under D (v2) "
        f"{diff_cell(heavy[D])}; WARM TTFT p90 under B {diff_cell(warm[B])}"
        + (f", under D {diff_cell(warm[D])}" if warm.get(D) is not None else "")
        + "."
    )
    ph = {(r["design_class"], r["variant"]): r for r in phases(df).iter_rows(named=True)}
    header = (
        "class",
        "variant",
        "TTFT p90",
        "arrival to prefill end p90",
        "after prefill p90",
        "hit rate",
    )
    rows = tuple(
        (cls, v, ms(r["ttft_p90"]), ms(r["to_prefill_p90"]), ms(r["after_p90"]), pct(r["hit_rate"]))
        for cls in ("HEAVY", "WARM")
        for v in (A, B, D)
        if (r := ph.get((cls, v))) is not None
    )
    get = lambda cls, v, k: ph.get((cls, v), {}).get(k)  # noqa: E731
    b_pre, a_pre = ms(get("HEAVY", B, "to_prefill_p90")), ms(get("HEAVY", A, "to_prefill_p90"))
    why = (
        f"HEAVY requests under D wait {ms(get('HEAVY', D, 'after_p90'))} ms at p90 after their "
        "prefill (the KV transfer and the decode instance's queue), which the design's \"best\" "
        f"leaves out; under B they reach the end of their prefill {b_pre} ms after arrival at "
        f"p90 against A's {a_pre} ms: the "
        "instance with the least decode is not the one with the shortest prefill queue. WARM "
        f"requests find {pct(get('WARM', B, 'hit_rate'))} of their input cached under B against "
        f"{pct(get('WARM', A, 'hit_rate'))} under A, where HEAVY prefills share their instances."
    )
    return Expectation(EXPECTED, SOURCE, outcome, bool(holds), header, rows, why)


@study(NAME, TITLE, QUESTION)
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    df = with_design_class(df)
    variants = ordered(sorted(set(df["variant"])), ORDER)
    overall = {r["variant"]: r for r in variant_summary(df).iter_rows(named=True)}
    cmp_all = {v: compare(df, A, v, "ttft_p90") for v in variants if v != A}
    s.table(
        "All requests, seeds pooled; differences paired against A over the same seeds (95% "
        "bootstrap interval; n.s.: contains 0).",
        [
            "variant",
            "requests",
            "errors",
            *latency_header("vs A"),
        ],
        [
            [
                v,
                str(overall[v]["requests"]),
                pct(overall[v]["error_rate"]),
                *latency_cells(
                    overall[v],
                    cmp_all.get(v),
                    compare(df, A, v, "e2e_p90") if v != A else None,
                ),
            ]
            for v in variants
        ],
    )
    rows, heavy, warm = [], {}, {}
    per_class = variant_summary(df, ("variant", "design_class"))
    for cls in CLASSES:
        sub = df.filter(pl.col("design_class") == cls)
        if sub.is_empty():
            continue
        for v in variants:
            r = per_class.filter((pl.col("variant") == v) & (pl.col("design_class") == cls))
            if r.is_empty():
                continue
            r0 = r.row(0, named=True)
            c = compare(sub, A, v, "ttft_p90") if v != A else None
            if cls == "HEAVY":
                heavy[v] = c
            elif cls == "WARM":
                warm[v] = c
            rows.append(
                [
                    cls,
                    v,
                    str(r0["requests"]),
                    ms(r0["ttft_s_p50"]),
                    ms(r0["ttft_s_p90"]),
                    diff_cell(c),
                    ms(r0["tpot_s_p50"]),
                    ms(r0["tpot_s_p90"]),
                    sec(r0["e2e_s_p50"]),
                    sec(r0["e2e_s_p90"]),
                    diff_cell(compare(sub, A, v, "e2e_p90") if v != A else None),
                ]
            )
    s.table(
        "Per class (the class B's classifier gave the request, so every variant is judged on "
        "the same requests):",
        [
            "class",
            "variant",
            "requests",
            "TTFT p50",
            "TTFT p90",
            "TTFT p90 vs A",
            "TPOT p50",
            "TPOT p90",
            "E2E p50 (s)",
            "E2E p90 (s)",
            "E2E p90 vs A",
        ],
        rows,
    )
    fig = kv_usage_over_time(
        data.samples(),
        variants,
        figures / "kv_usage.png",
        "KV-cache usage per instance over time (first seed)",
    )
    if fig is not None:
        s.figure(fig, "Per-instance KV-cache usage over time, one panel per variant.", root)
    e = faced(df, heavy, warm)
    if e is not None:
        s.expect(e)
    thresholds = [v for v in variants if v.startswith(("B:", "C:"))]
    best_t = min(thresholds, key=lambda v: overall[v]["ttft_s_p90"], default=None)
    parts = []
    if D in heavy:
        parts.append(
            f"on HEAVY requests, D (KV transfer) {direction(heavy[D], 'TTFT p90')} against A"
        )
    if B in heavy:
        parts.append(f"B (v1) {direction(heavy[B], 'it')}")
    if best_t is not None:
        parts.append(
            f"of the thresholds, {best_t.split(': ', 1)[1]} has the lowest overall TTFT p90 "
            f"(it {direction(cmp_all.get(best_t), 'TTFT p90')} against A)"
        )
    s.answer = ("; ".join(parts) + ".") if parts else "The data do not decide it (no runs of A)."
    s.answer = s.answer[0].upper() + s.answer[1:]
    for v in (B, D):
        if heavy.get(v) is not None:
            s.findings.append(finding_text(heavy[v], f"{v} vs A, HEAVY TTFT p90"))
    return s
