# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (agentic_kvc)
#     language: python
#     name: akvc
# ---

# %% [markdown]
# # Latency by policy and route class
#
# TTFT, TPOT and E2E percentiles (p50/p90/p99) per policy variant (seeds pooled) and per route
# class, computed from every complete planned run's `requests.jsonl`. Writes
# `latency_by_variant.csv`, `latency_by_run.csv`, `latency_by_route_class.csv` (and a JSON copy
# of each) to `tables_dir`, and figures to `figures_dir`.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = ""  # results/work/plan.json; empty: every complete run under results_dir
tables_dir = "results/tables/latency_by_policy"
figures_dir = "results/figures/latency_by_policy"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
import seaborn as sns

from agentic_kvc.analysis.load import open_runs, requests_frame
from agentic_kvc.analysis.tables import (
    LATENCIES,
    latency_summary,
    route_class_summary,
    to_pandas,
    write_table,
)

runs, plan = open_runs(results_dir, archive_dir, plan_path)
requests = requests_frame(runs, plan)
tables = Path(tables_dir)
figures = Path(figures_dir)
figures.mkdir(parents=True, exist_ok=True)
print(f"{len(runs)} runs, {requests.height} requests")


# %%
by_variant = write_table(
    latency_summary(requests, ["experiment", "variant"]), tables, "latency_by_variant"
)
by_run = write_table(
    latency_summary(requests, ["run_id", "experiment", "variant", "seed"]), tables, "latency_by_run"
)
by_class = write_table(
    route_class_summary(requests, ["experiment", "variant"]), tables, "latency_by_route_class"
)
by_variant.select(
    "experiment",
    "variant",
    "requests",
    "errors",
    *[f"{lat}_p{p}" for lat in LATENCIES for p in (50, 90, 99)],
)

# %%
by_class.select(
    "experiment",
    "variant",
    "route_class",
    "share",
    "requests",
    "ttft_s_p50",
    "ttft_s_p99",
    "e2e_s_p50",
)

# %% [markdown]
# ## Percentiles per variant
#
# One row of panels per experiment: experiments differ in scale by orders of magnitude (a
# tiny CPU model vs a simulated GPU fleet), so each gets its own axes.

# %%
long = by_variant.unpivot(
    index=["experiment", "variant"],
    on=[f"{lat}_p{p}" for lat in LATENCIES for p in (50, 90, 99)],
    variable_name="stat",
    value_name="seconds",
).with_columns(
    pl.col("stat").str.extract(r"^(\w+?)_s_").alias("metric"),
    pl.col("stat").str.extract(r"_(p\d+)$").alias("percentile"),
)
if long.height and long["seconds"].drop_nulls().len():
    grid = sns.catplot(
        data=to_pandas(long.drop_nulls("seconds")),
        x="percentile",
        y="seconds",
        hue="variant",
        col="metric",
        row="experiment",
        kind="bar",
        sharey=False,
        height=2.8,
        aspect=1.2,
    )
    grid.set_titles("{row_name}: {col_name}")
    grid.savefig(figures / "latency_percentiles.png", dpi=110)
    plt.show()

# %% [markdown]
# ## TTFT distribution per variant (ECDF), one panel per experiment

# %%
ok = requests.filter(pl.col("error").is_null() & pl.col("ttft_s").is_not_null())
if ok.height:
    grid = sns.displot(
        data=to_pandas(ok),
        x="ttft_s",
        hue="variant",
        col="experiment",
        kind="ecdf",
        log_scale=True,
        height=3,
        aspect=1.2,
        facet_kws={"sharex": False},
    )
    grid.set_axis_labels("TTFT (s)", "share of requests")
    grid.savefig(figures / "ttft_ecdf.png", dpi=110)
    plt.show()

# %% [markdown]
# ## TTFT by route class, one panel per experiment

# %%
if ok.height:
    grid = sns.catplot(
        data=to_pandas(ok.with_columns(pl.col("route_class").fill_null("UNCLASSIFIED"))),
        x="route_class",
        y="ttft_s",
        hue="variant",
        col="experiment",
        kind="box",
        showfliers=False,
        sharex=False,
        sharey=False,
        height=3,
        aspect=1.4,
    )
    grid.set_axis_labels("route class", "TTFT (s)")
    grid.savefig(figures / "ttft_by_route_class.png", dpi=110)
    plt.show()
