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
from agentic_kvc.analysis.studies.figures import kv_usage_over_time

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
    if not samples.is_empty():
        sm = samples.with_columns(
            pl.when(pl.col("variant") == "combined")
            .then(pl.concat_str([pl.lit("combined + "), pl.col("policy")]))
            .otherwise(pl.col("variant"))
            .alias("variant")
        )
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
    if c_t is not None:
        s.findings.append(finding_text(c_t, f"static 6P+2D vs {base}, TTFT p90"))
    return s
