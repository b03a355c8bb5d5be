"""Study 4, static 6P+2D disaggregation against combined instances: the memory wall.

With six prefill and two decode instances, every request's KV must fit on two instances while
it decodes. When their KV cache fills, finished prefills wait for room before decode starts:
that wait is part of TTFT. Here the share of TTFT spent after the prefill finished (transfer
plus waiting for the decode instance to take the request) measures it.
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
)
from agentic_kvc.analysis.studies.common import (
    latency_cells,
    latency_header,
    ordered,
    study,
    variant_summary,
)
from agentic_kvc.analysis.studies.figures import kv_usage_over_time
from agentic_kvc.paired import PairedResult

NAME = "static_pd"
TITLE = "4. Static 6P+2D against combined instances"
QUESTION = (
    "Does a static split into six prefill and two decode instances beat eight combined "
    "instances on TTFT and E2E, and how much of its TTFT is spent waiting for the KV to reach "
    "a decode instance with room (the memory wall)?"
)
STATIC = "static 6P+2D"
DECODE_POOL = (6, 7)


def kv_wait(df: pl.DataFrame) -> pl.DataFrame:
    """Per variant: the mean share of TTFT after the prefill finished, over disaggregated
    requests, and the KV usage peak is elsewhere (samples)."""
    pd_req = df.filter(
        (pl.col("prefill_instance") != pl.col("decode_instance"))
        & pl.col("t_prefill_done").is_not_null()
        & (pl.col("ttft_s") > 0)
    )
    share = ((pl.col("t_first_token") - pl.col("t_prefill_done")) / pl.col("ttft_s")).clip(0, 1)
    return pd_req.group_by("variant").agg(
        pl.len().alias("disaggregated"),
        share.mean().alias("kv_wait_share"),
        (pl.col("t_first_token") - pl.col("t_prefill_done")).quantile(0.9).alias("kv_wait_p90_s"),
    )


EXPECTED = (
    "static 6P+2D hits the memory wall: its two decode instances' KV cache fills (97.1% "
    "usage) and requests spend 87.7% of their TTFT waiting for KV room"
)
SOURCE = "seeds/002, Context"
WALL = 0.5  # the wall "holds" when most of a disaggregated request's TTFT is the KV wait
FULL = 0.95  # KV usage counted as full


def phase_row(df: pl.DataFrame, variant: str) -> dict[str, float | None]:
    """TTFT p90 and the p90 of its two phases (arrival to prefill end; after it), the tables'
    quantile."""
    sub = df.filter(
        (pl.col("variant") == variant) & (pl.col("error").is_null() | (pl.col("error") == ""))
    )
    if sub.is_empty():
        return {}
    r = sub.select(
        pl.col("ttft_s").quantile(0.9, "linear").alias("ttft_p90"),
        (pl.col("t_prefill_done") - pl.col("t_proxy_recv")).quantile(0.9, "linear").alias("pre"),
        (pl.col("t_first_token") - pl.col("t_prefill_done")).quantile(0.9, "linear").alias("post"),
    ).row(0, named=True)
    return r


def faced(
    df: pl.DataFrame,
    base: str,
    c_t: PairedResult | None,
    wait: dict,
    samples: pl.DataFrame,
) -> Expectation | None:
    """The design's memory wall against static 6P+2D's measured KV wait, with the rows
    (static and its combined baseline) that show where its TTFT goes instead."""
    share = wait.get(STATIC, {}).get("kv_wait_share")
    if share is None or c_t is None:
        return None
    full = None
    if not samples.is_empty():
        dec = samples.filter(
            (pl.col("variant") == STATIC) & pl.col("instance").is_in(list(DECODE_POOL))
        )
        if not dec.is_empty():
            full = float(dec.select((pl.col("kv_usage") >= FULL).mean()).item())
    peak = (
        None
        if samples.is_empty()
        else samples.filter(
            (pl.col("variant") == STATIC) & pl.col("instance").is_in(list(DECODE_POOL))
        )["kv_usage"].max()
    )
    outcome = (
        f"static 6P+2D's TTFT p90 is {diff_cell(c_t)} against {base}; its decode instances' KV "
        f"usage peaks at {pct(peak)}"
        + (
            f" (at or above {pct(FULL, 0)} for {pct(full)} of the samples)"
            if full is not None
            else ""
        )
        + f", but its disaggregated requests spend {pct(share)} of their TTFT after the prefill."
    )
    header = (
        "variant",
        "TTFT p90",
        "arrival to prefill end p90",
        "after prefill p90",
        "KV wait share of TTFT",
    )
    rows = []
    for v in (STATIC, base):
        r = phase_row(df, v)
        if r:
            rows.append(
                (
                    v,
                    ms(r["ttft_p90"]),
                    ms(r["pre"]),
                    ms(r["post"]),
                    pct(wait.get(v, {}).get("kv_wait_share")),
                )
            )
    st = phase_row(df, STATIC)
    why = (
        f"{pct(1 - share, 0)} of static 6P+2D's TTFT passes before its prefill ends (p90 "
        f"{ms(st.get('pre'))} ms against {base}'s whole TTFT p90 of "
        f"{ms(phase_row(df, base).get('ttft_p90'))} ms): six instances do every prefill that "
        "eight share when combined, so prompts queue at the prefill instances; the decode "
        "instances reach their peak"
        + (
            f" but are full (>= {pct(FULL, 0)}) in only {pct(full)} of the samples, so the "
            "wall is touched, not leaned on."
            if full is not None
            else "."
        )
    )
    return Expectation(EXPECTED, SOURCE, outcome, share >= WALL, header, tuple(rows), why)


@study(NAME, TITLE, QUESTION)
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    # The combined baselines are labelled by policy (experiment static_combined).
    df = df.with_columns(
        pl.when(pl.col("variant") == "combined")
        .then(pl.concat_str([pl.lit("combined + "), pl.col("policy")]))
        .otherwise(pl.col("variant"))
        .alias("variant")
    )
    variants = ordered(sorted(set(df["variant"])), (STATIC,))
    summ = {r["variant"]: r for r in variant_summary(df).iter_rows(named=True)}
    wait = {r["variant"]: r for r in kv_wait(df).iter_rows(named=True)}
    samples = data.samples()
    peak = {}
    samples_v = pl.DataFrame()
    if not samples.is_empty():
        sm = samples.with_columns(
            pl.when(pl.col("variant") == "combined")
            .then(pl.concat_str([pl.lit("combined + "), pl.col("policy")]))
            .otherwise(pl.col("variant"))
            .alias("variant")
        )
        samples_v = sm
        dec = sm.filter((pl.col("variant") != STATIC) | pl.col("instance").is_in(list(DECODE_POOL)))
        for r in (
            dec.group_by("variant")
            .agg(pl.col("kv_usage").max().alias("peak"), pl.col("kv_usage").mean().alias("mean"))
            .iter_rows(named=True)
        ):
            peak[r["variant"]] = r
    base = next((v for v in variants if v.startswith("combined")), None)
    rows, cmp = [], {}
    for v in variants:
        r = summ[v]
        c_t = compare(df, base, v, "ttft_p90") if base and v != base else None
        c_e = compare(df, base, v, "e2e_p90") if base and v != base else None
        cmp[v] = (c_t, c_e)
        rows.append(
            [
                v,
                str(r["requests"]),
                *latency_cells(r, c_t, c_e),
                pct(wait.get(v, {}).get("kv_wait_share")),
                pct(peak.get(v, {}).get("mean")),
                pct(peak.get(v, {}).get("peak")),
            ]
        )
    s.table(
        f"Seeds pooled; differences paired against {base} (95% interval). KV wait: mean share "
        "of a disaggregated request's TTFT after its prefill finished. KV usage: decode "
        "instances (6 and 7) for static 6P+2D, every instance for combined.",
        [
            "variant",
            "requests",
            *latency_header("TTFT p90 vs combined", "E2E p90 vs combined"),
            "KV wait share of TTFT",
            "KV usage mean",
            "KV usage peak",
        ],
        rows,
    )
    fig = kv_usage_over_time(
        samples,
        [STATIC],
        figures / "decode_kv_usage.png",
        "Static 6P+2D: decode instances' KV usage (first seed)",
        instances=DECODE_POOL,
    )
    if fig is not None:
        s.figure(fig, "KV-cache usage of the two decode instances of static 6P+2D over time.", root)
    c_t, c_e = cmp.get(STATIC, (None, None))
    if base is None or STATIC not in summ:
        s.answer = "The data do not decide it (static 6P+2D or its combined baseline has no runs)."
        return s
    s.answer = (
        f"Against {base}, static 6P+2D {direction(c_t, 'TTFT p90')} and "
        f"{direction(c_e, 'E2E p90')}; "
        f"its disaggregated requests spend {pct(wait.get(STATIC, {}).get('kv_wait_share'), 0)} "
        f"of their TTFT after the prefill, and its decode instances' KV usage peaks at "
        f"{pct(peak.get(STATIC, {}).get('peak'), 0)}."
    )
    e = faced(df, base, c_t, wait, samples_v)
    if e is not None:
        s.expect(e)
    if c_t is not None:
        s.findings.append(finding_text(c_t, f"static 6P+2D vs {base}, TTFT p90"))
    return s
