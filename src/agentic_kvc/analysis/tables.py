"""Comparison tables over request and sample frames (shared by notebooks and REPORT.md).

The statistics follow `metrics.summary` so a table row over one run equals that run's
summary.json: latencies are taken over requests without an error and with the latency present;
percentiles interpolate linearly (numpy's default); the prefix-hit rate is cached input tokens
over input tokens of error-free requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

LATENCIES = ("ttft_s", "tpot_s", "e2e_s")
PERCENTILES = (50, 90, 99)


def _ok() -> pl.Expr:
    return pl.col("error").is_null() | (pl.col("error") == "")


def latency_summary(requests: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Per group of `by`: request count, errors, mean/p50/p90/p99 of each latency, hit rate."""
    ok = _ok()
    aggs: list[pl.Expr] = [
        pl.len().alias("requests"),
        (~ok).sum().alias("errors"),
    ]
    for lat in LATENCIES:
        good = pl.col(lat).filter(ok & pl.col(lat).is_not_null())
        aggs.append(good.mean().alias(f"{lat}_mean"))
        for p in PERCENTILES:
            aggs.append(good.quantile(p / 100, interpolation="linear").alias(f"{lat}_p{p}"))
    aggs += [
        pl.col("input_tokens").filter(ok).sum().alias("input_tokens"),
        pl.col("cached_tokens").fill_null(0).filter(ok).sum().alias("cached_tokens"),
        pl.col("output_tokens").filter(ok).sum().alias("output_tokens"),
    ]
    out = requests.group_by(list(by)).agg(aggs)
    return out.with_columns(
        (pl.col("errors") / pl.col("requests")).alias("error_rate"),
        pl.when(pl.col("input_tokens") > 0)
        .then(pl.col("cached_tokens") / pl.col("input_tokens"))
        .otherwise(0.0)
        .alias("prefix_hit_rate"),
    ).sort(list(by))


def route_class_summary(requests: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """`latency_summary` per route class within each group, plus each class's share of it."""
    rc = requests.with_columns(
        pl.when(pl.col("route_class").is_null() | (pl.col("route_class") == ""))
        .then(pl.lit("UNCLASSIFIED"))
        .otherwise(pl.col("route_class"))
        .alias("route_class")
    )
    out = latency_summary(rc, [*by, "route_class"])
    totals = rc.group_by(list(by)).agg(pl.len().alias("_group_requests"))
    return (
        out.join(totals, on=list(by), how="left")
        .with_columns((pl.col("requests") / pl.col("_group_requests")).alias("share"))
        .drop("_group_requests")
        .sort([*by, "route_class"])
    )


def token_load_per_instance(requests: pl.DataFrame) -> pl.DataFrame:
    """Prompt tokens each instance computed (input - cached) per run, zero for idle instances.

    Idle instances count: a policy that starves an instance is imbalanced, and dropping it would
    hide that. The instance count comes from the run's config (`instances` column).
    """
    ok = requests.filter(_ok() & pl.col("prefill_instance").is_not_null())
    work = ok.group_by(["run_id", pl.col("prefill_instance").alias("instance")]).agg(
        (pl.col("input_tokens") - pl.col("cached_tokens").fill_null(0)).sum().alias("tokens")
    )
    runs = requests.select(
        "run_id", "experiment", "variant", "policy", "seed", "instances"
    ).unique()
    grid = runs.with_columns(pl.int_ranges(0, pl.col("instances")).alias("instance")).explode(
        "instance"
    )
    return (
        grid.join(work, on=["run_id", "instance"], how="full", coalesce=True)
        .with_columns(pl.col("tokens").fill_null(0))
        .sort(["run_id", "instance"])
    )


def token_load_summary(per_instance: pl.DataFrame) -> pl.DataFrame:
    """Per run: max and min computed tokens over instances and their ratio (null if min is 0)."""
    return (
        per_instance.group_by(["run_id", "experiment", "variant", "policy", "seed"])
        .agg(
            pl.col("tokens").max().alias("tokens_max"),
            pl.col("tokens").min().alias("tokens_min"),
            pl.col("tokens").sum().alias("tokens_total"),
        )
        .with_columns(
            pl.when(pl.col("tokens_min") > 0)
            .then(pl.col("tokens_max") / pl.col("tokens_min"))
            .otherwise(None)
            .alias("max_over_min")
        )
        .sort("run_id")
    )


# Statistics compared between a simulated run and its real twin.
TWIN_STATS = ("ttft_s_p50", "ttft_s_p90", "e2e_s_p50", "e2e_s_p90", "prefix_hit_rate")


def sim_vs_real(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per real run that has a simulated twin (same config but `backend`, see
    `load.twin_key`): each statistic of TWIN_STATS for both, and the simulator's relative error
    (sim / real - 1; for the hit rate, the difference in points)."""
    by = ["twin_key", "experiment", "variant", "seed", "run_id"]
    lat = latency_summary(requests, [*by, "backend"]).select(
        *by, "backend", "requests", "errors", *TWIN_STATS
    )
    sim = lat.filter(pl.col("backend") == "sim").drop("backend")
    real = lat.filter(pl.col("backend") != "sim")
    joined = real.join(sim, on="twin_key", how="inner", suffix="_sim")
    errors = [
        (pl.col(f"{s}_sim") - pl.col(s)).alias(f"{s}_diff")
        if s == "prefix_hit_rate"
        else (pl.col(f"{s}_sim") / pl.col(s) - 1).alias(f"{s}_rel_err")
        for s in TWIN_STATS
    ]
    return joined.with_columns(errors).sort(["experiment", "variant", "seed"])


def with_label(df: pl.DataFrame) -> pl.DataFrame:
    """Add `label` = "experiment: variant", what figures colour by: one variant name (e.g.
    round_robin) can belong to several experiments, which must not be pooled."""
    return df.with_columns(
        pl.concat_str([pl.col("experiment"), pl.col("variant")], separator=": ").alias("label")
    )


def to_pandas(df: pl.DataFrame):  # type: ignore[no-untyped-def]
    """A pandas frame for seaborn without pyarrow (polars' own `to_pandas` needs it)."""
    import pandas as pd

    return pd.DataFrame(df.to_dict(as_series=False))


def write_table(df: pl.DataFrame, out_dir: str | Path, name: str) -> pl.DataFrame:
    """Write `df` as out_dir/name.csv and .json (for spreadsheets and for code); return it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.write_csv(out / f"{name}.csv")
    df.write_json(out / f"{name}.json")
    return df
