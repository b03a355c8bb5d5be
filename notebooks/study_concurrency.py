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
# # Study: Concurrency track
#
# With at most 64 or 128 agent sessions in flight, how do the policies compare on TTFT and E2E
# against round-robin, and does the ranking change with the limit?
#
# The analysis lives in `agentic_kvc.analysis.studies.concurrency` (the same code whether this runs
# interactively or under papermill); this notebook runs it over the study's complete runs,
# writes the report section (`section.md`, `findings.json`) to `tables_dir` and figures to
# `figures_dir`, and shows the result.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_concurrency"
figures_dir = "results/figures/study_concurrency"

# %%
from agentic_kvc.analysis.studies import run_study, show

section = run_study("concurrency", results_dir, archive_dir, plan_path, tables_dir, figures_dir)
show(section)

# %% [markdown]
# The findings this study contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
