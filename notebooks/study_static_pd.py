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
# # Study: Static 6P+2D against combined
#
# Does a static split into six prefill and two decode instances beat eight combined instances
# on TTFT and E2E, and how much of its TTFT is spent waiting for the KV to reach a decode
# instance with room (the memory wall)?
#
# The analysis lives in `agentic_kvc.analysis.studies.static_pd` (the same code whether this runs
# interactively or under papermill); this notebook runs it over the study's complete runs,
# writes the report section (`section.md`, `findings.json`) to `tables_dir` and figures to
# `figures_dir`, and shows the result.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_static_pd"
figures_dir = "results/figures/study_static_pd"

# %%
from agentic_kvc.analysis.studies import run_study, show

section = run_study("static_pd", results_dir, archive_dir, plan_path, tables_dir, figures_dir)
show(section)

# %% [markdown]
# The findings this study contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
