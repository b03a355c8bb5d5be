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
# # Study: Every policy on several workloads
#
# Which policy has the lowest TTFT p90 on each workload (default coding agent, long-context
# coding agent, Mooncake conversation trace), is its lead significant, and where over load x
# reuse does each policy win?
#
# The analysis lives in `agentic_kvc.analysis.studies.peers` (the same code whether this runs
# interactively or under papermill); this notebook runs it over the study's complete runs,
# writes the report section (`section.md`, `findings.json`) to `tables_dir` and figures to
# `figures_dir`, and shows the result.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_peers"
figures_dir = "results/figures/study_peers"

# %%
from agentic_kvc.analysis.studies import run_study, show

section = run_study("peers", results_dir, archive_dir, plan_path, tables_dir, figures_dir)
show(section)

# %% [markdown]
# The findings this study contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
