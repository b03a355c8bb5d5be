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
# # Simulator vs real engine
#
# Every real run that has a simulated twin (the same resolved config except `backend: sim`,
# e.g. the `real_cpu` and `sim_cpu_twin` experiments) side by side: TTFT and E2E p50/p90 and
# the prefix-hit rate, with the simulator's error. Writes `sim_vs_real.csv` (and JSON) to
# `tables_dir`, figures to `figures_dir`. With no twins, the table is empty and no figure is
# drawn.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = ""  # results/work/plan.json; empty: every complete run under results_dir
tables_dir = "results/tables/sim_vs_real"
figures_dir = "results/figures/sim_vs_real"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
import seaborn as sns

from agentic_kvc.analysis.load import open_runs, requests_frame
from agentic_kvc.analysis.tables import TWIN_STATS, sim_vs_real, to_pandas, write_table

runs, plan = open_runs(results_dir, archive_dir, plan_path)
requests = requests_frame(runs, plan)
figures = Path(figures_dir)
figures.mkdir(parents=True, exist_ok=True)
twins = write_table(sim_vs_real(requests), tables_dir, "sim_vs_real")
print(f"{len(runs)} runs, {twins.height} real runs with a simulated twin")
twins

# %% [markdown]
# ## Latency percentiles, real vs simulated

# %%
latencies = [s for s in TWIN_STATS if s != "prefix_hit_rate"]
if twins.height:
    long = pl.concat(
        [
            twins.select(
                "variant",
                pl.lit(stat).alias("stat"),
                pl.col(stat).alias("real"),
                pl.col(f"{stat}_sim").alias("sim"),
            )
            for stat in latencies
        ]
    ).unpivot(index=["variant", "stat"], variable_name="source", value_name="seconds")
    grid = sns.catplot(
        data=to_pandas(long.drop_nulls("seconds")),
        x="variant",
        y="seconds",
        hue="source",
        col="stat",
        kind="bar",
        sharey=False,
        height=3,
        aspect=0.9,
        errorbar=None,  # one bar per run; seeds of a variant averaged
    )
    grid.set_titles("{col_name}")
    grid.savefig(figures / "sim_vs_real_latency.png", dpi=120)
    plt.show()
