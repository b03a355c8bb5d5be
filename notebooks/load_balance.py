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
# # Load balance across instances
#
# How evenly each policy spreads prompt computation: tokens each instance computed (input minus
# cached, idle instances counting as 0), the max/min over instances per run, and the
# per-instance samples (running / waiting requests, KV usage) over time. Writes
# `token_load_per_instance.csv`, `token_load_summary.csv` and `instance_samples_summary.csv`
# (and JSON copies) to `tables_dir`, figures to `figures_dir`.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = ""  # results/work/plan.json; empty: every complete run under results_dir
tables_dir = "results/tables/load_balance"
figures_dir = "results/figures/load_balance"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
import seaborn as sns

from agentic_kvc.analysis.load import open_runs, requests_frame, samples_frame
from agentic_kvc.analysis.tables import (
    to_pandas,
    token_load_per_instance,
    token_load_summary,
    with_label,
    write_table,
)

runs, plan = open_runs(results_dir, archive_dir, plan_path)
requests = requests_frame(runs, plan)
samples = with_label(samples_frame(runs, plan))
tables = Path(tables_dir)
figures = Path(figures_dir)
figures.mkdir(parents=True, exist_ok=True)
print(f"{len(runs)} runs, {requests.height} requests, {samples.height} instance samples")


# %%
per_instance = write_table(token_load_per_instance(requests), tables, "token_load_per_instance")
load = write_table(token_load_summary(per_instance), tables, "token_load_summary")
load

# %% [markdown]
# ## Instance samples (means over each run)

# %%
sample_summary = write_table(
    samples.group_by(["run_id", "experiment", "variant", "instance"])
    .agg(
        pl.len().alias("samples"),
        pl.col("running").mean().alias("running_mean"),
        pl.col("running").max().alias("running_max"),
        pl.col("waiting").mean().alias("waiting_mean"),
        pl.col("waiting").max().alias("waiting_max"),
        pl.col("kv_usage").mean().alias("kv_usage_mean"),
    )
    .sort(["run_id", "instance"]),
    tables,
    "instance_samples_summary",
)
sample_summary

# %% [markdown]
# ## Computed tokens per instance

# %%
if per_instance.height:
    grid = sns.catplot(
        data=to_pandas(per_instance),
        x="instance",
        y="tokens",
        hue="variant",
        col="experiment",
        kind="bar",
        errorbar=("pi", 100),  # bars: mean over seeds; whiskers: min..max over seeds
        sharex=False,
        sharey=False,
        height=3,
        aspect=1.3,
    )
    grid.set_axis_labels("instance", "prompt tokens computed")
    grid.savefig(figures / "token_load_per_instance.png", dpi=110)
    plt.show()

# %% [markdown]
# ## Running requests per instance over time (first seed of each experiment's variant)

# %%
if samples.height and samples["running"].drop_nulls().len():
    first = samples.group_by("label").agg(pl.col("run_id").min()).get_column("run_id")
    shown = samples.filter(pl.col("run_id").is_in(first.to_list()))
    grid = sns.relplot(
        data=to_pandas(shown),
        x="t",
        y="running",
        hue="instance",
        col="label",
        col_wrap=4,
        kind="line",
        height=3,
        aspect=1.4,
        palette="tab10",
        legend="brief",
    )
    grid.set_axis_labels("time (s)", "running requests")
    grid.savefig(figures / "running_over_time.png", dpi=120)
    plt.show()
