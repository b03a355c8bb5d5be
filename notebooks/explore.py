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
# # Exploring runs
#
# A starting point for your own questions, on any results directory: how to load runs into
# polars frames, compare two variants (or two runs) with the paired statistics, and look at
# one session's requests on a timeline. Every name it uses is in `agentic_kvc.analysis`.
#
# Open it with `make lab` (the `akvc` kernel starts in the repository root, so the default
# paths below are the pipeline's), or run it with papermill like the report's notebooks.
# Writes `paired.csv` (and JSON) to `tables_dir` and two figures to `figures_dir`.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"  # the pipeline's plan; "": every complete run, unlabelled
tables_dir = "results/tables/explore"
figures_dir = "results/figures/explore"
experiment = ""  # compare within this experiment; empty: the one with the most variants
backend = ""  # and this backend ("sim" or "vllm"); empty: the one with the most variants
baseline = ""  # variant names (the `variant` column); empty: the experiment's first two
candidate = ""
run_id = ""  # the run whose session is drawn; empty: the baseline's first seed
session_id = ""  # empty: the session with the most turns in that run

# %% [markdown]
# ## Loading runs
#
# `find_runs` lists the complete run directories (`open_runs` adds the experiment plan when
# `plan_path` names one, which labels each run with its experiment and variant);
# `requests_frame` reads their `requests.jsonl` (one row per request, with the run's labels),
# and `samples_frame` their per-instance samples (`instances.jsonl`).

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
from matplotlib.patches import Patch

from agentic_kvc.analysis.load import open_runs, requests_frame, samples_frame
from agentic_kvc.analysis.tables import write_table
from agentic_kvc.paired import fmt_diff, paired_compare, paired_table

if plan_path and not Path(plan_path).is_file():
    print(f"{plan_path}: no such plan (made by `make report`); reading every complete run")
    plan_path = ""
runs, plan = open_runs(results_dir, archive_dir, plan_path)
if runs and plan is None:
    print(
        "Without a plan every run is in experiment '(unplanned)' and its variant is its policy:"
        " runs of different experiments with one policy and seed would be compared as pairs."
    )
requests = requests_frame(runs, plan)
samples = samples_frame(runs, plan)
tables, figures = Path(tables_dir), Path(figures_dir)
figures.mkdir(parents=True, exist_ok=True)
if not runs:
    print(
        f"No complete runs under {Path(results_dir).resolve()}/runs or {archive_dir}: nothing to"
        " explore. Make some with `make report`, or one with"
        " `.venv/bin/akvc run config/runs/sim_agentic.yaml`, then run this notebook again."
    )
requests.group_by("run_id", "experiment", "variant", "backend", "seed").agg(
    pl.len().alias("requests"), pl.col("error").is_not_null().sum().alias("errors")
).sort("experiment", "variant", "seed")

# %% [markdown]
# ## Comparing two variants
#
# Runs of two variants with the same workload seed replayed the same sessions, so they are
# pairs. `paired_compare` gives each variant's value (seeds pooled), the relative difference
# candidate / baseline - 1 and its 95% bootstrap interval over seeds and requests; "n.s." marks
# an interval that contains 0. Compare within one experiment: variants of different
# experiments ran different workloads or fleets.

# %%
# Simulated and real runs of one variant are never pairs: compare within one backend too.
groups = (
    requests.group_by("experiment", "backend")
    .agg(pl.col("variant").unique().sort().alias("variants"))
    .filter(pl.col("experiment") == experiment if experiment else pl.lit(True))
    .filter(pl.col("backend") == backend if backend else pl.lit(True))
    .sort(pl.col("variants").list.len(), "experiment", "backend", descending=[True, False, False])
)
if groups.height:
    experiment, backend = groups["experiment"][0], groups["backend"][0]
chosen = requests.filter((pl.col("experiment") == experiment) & (pl.col("backend") == backend))
variants = sorted(chosen["variant"].unique().to_list())
if not (baseline and candidate) and len(variants) >= 2:
    baseline, candidate = baseline or variants[0], candidate or variants[1]
paired = pl.DataFrame()
if baseline and candidate:
    paired = write_table(
        paired_table(
            chosen,
            baseline,
            [candidate],
            metrics=("ttft_p50", "ttft_p90", "e2e_p90", "hit_rate"),
        ),
        tables,
        "paired",
    )
    for row in paired.iter_rows(named=True):
        print(f"{row['metric']:>10}: {candidate} vs {baseline} {fmt_diff(row)}")
elif runs:
    print(f"{experiment!r} ({backend}) has variants {variants}: fewer than two to compare")
paired

# %% [markdown]
# ## Comparing two runs
#
# Any two runs compare the same way: label each run as its own side (`by="run_id"`) and make
# them one pair. With a single pair the interval carries only the spread within the runs (the
# requests), not the spread between workload seeds, so it is narrower than a variant
# comparison's. Here: the two variants' runs of their first common seed.

# %%
side = [
    chosen.filter(pl.col("variant") == v).select("seed", "run_id") for v in (baseline, candidate)
]
both = side[0].unique().join(side[1].unique(), on="seed", suffix="_b").sort("seed")
if both.height:
    run_a, run_b = both["run_id"][0], both["run_id_b"][0]
    two = requests.filter(pl.col("run_id").is_in([run_a, run_b])).with_columns(
        pl.lit(0).alias("pair")
    )
    result = paired_compare(two, run_a, run_b, "ttft_p90", by="run_id", pair_on=("pair",))
    print(f"TTFT p90, run {run_b} ({candidate}) vs run {run_a} ({baseline}): {fmt_diff(result)}")
elif runs:
    print("no seed with runs of both variants: no two runs to compare")

# %% [markdown]
# ## One session's requests over time
#
# Each turn is a bar from the proxy receiving the request to its first token (queueing and
# prefill) and on to its last token (decode), on the instance that ran it (`P` prefill, `D`
# decode when they differ). The gaps between turns are the agent's tool calls and thinking.
# A failed request is a cross at its arrival.

# %%
if not run_id and runs:
    side = chosen.filter(pl.col("variant") == baseline) if baseline else requests
    run_id = side.sort("seed", "run_id")["run_id"][0]
run = requests.filter(pl.col("run_id") == run_id)
if not session_id and run.height:
    session_id = (
        run.group_by("session_id")
        .len()
        .sort("len", "session_id", descending=[True, False])["session_id"][0]
    )
session = run.filter(pl.col("session_id") == session_id).sort("turn")
if session.height:
    t0 = run["t_proxy_recv"].min()
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.35 * session.height))
    for r in session.iter_rows(named=True):
        if r["t_proxy_recv"] is None:  # failed before reaching the proxy: no time to draw
            continue
        start = r["t_proxy_recv"] - t0
        where = f"P{r['prefill_instance']}"
        if r["decode_instance"] is not None and r["decode_instance"] != r["prefill_instance"]:
            where += f" D{r['decode_instance']}"
        if r["error"] or r["t_first_token"] is None:
            ax.plot(start, r["turn"], "x", color="tab:red")
            ax.annotate(f" {r['error'] or 'no token'}", (start, r["turn"]), va="center")
            continue
        first, done = r["t_first_token"] - t0, r["t_done"] - t0
        ax.barh(r["turn"], first - start, left=start, color="tab:orange", height=0.6)
        ax.barh(r["turn"], done - first, left=first, color="tab:blue", height=0.6)
        ax.annotate(f" {where}", (done, r["turn"]), va="center", fontsize=8)
    ax.set(xlabel="time since the run's first request (s)", ylabel="turn")
    ax.set_yticks(session["turn"].to_list())
    ax.invert_yaxis()
    ax.set_title(f"session {session_id} of run {run_id} ({run['variant'][0]})", loc="left")
    legend = [
        Patch(color="tab:orange", label="arrival to first token"),
        Patch(color="tab:blue", label="first token to done"),
    ]
    ax.legend(handles=legend, loc="lower right", bbox_to_anchor=(1, 1), ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(figures / "session_timeline.png", dpi=110)
    plt.show()
    print(session.select("turn", "input_tokens", "cached_tokens", "route_class", "ttft_s", "e2e_s"))
elif runs:
    print(f"run {run_id!r} has no session {session_id!r}")

# %% [markdown]
# ## The same run's instances over time
#
# `samples_frame` holds what each instance reported while the run went on (running and waiting
# requests, KV cache usage).

# %%
inst = samples.filter(pl.col("run_id") == run_id).sort("instance", "t")
if inst.height:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3), sharex=True)
    for i, part in inst.group_by("instance", maintain_order=True):
        axes[0].plot(part["t"], part["running"], label=f"instance {i[0]}")
        axes[1].plot(part["t"], part["kv_usage"])
    axes[0].set(xlabel="time (s)", ylabel="running requests")
    axes[1].set(xlabel="time (s)", ylabel="KV cache usage")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figures / "instances_over_time.png", dpi=110)
    plt.show()
elif runs:
    print(f"run {run_id!r} has no instance samples")
