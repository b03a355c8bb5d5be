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
# # Study: Adaptive prefill offload (A-D)
#
# Does classifying requests as WARM / MEDIUM / HEAVY and moving HEAVY prefills (v1: to the
# instance with the least decode; v2: to another instance with a KV transfer) improve on
# combined instances with LMetric (A), per class, and which threshold T works best?
#
# The analysis lives in `agentic_kvc.analysis.studies.adaptive` (the same code whether this runs
# interactively or under papermill); this notebook runs it over the study's complete runs,
# writes the report section (`section.md`, `findings.json`) to `tables_dir` and figures to
# `figures_dir`, and shows the result.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_adaptive"
figures_dir = "results/figures/study_adaptive"

# %%
from agentic_kvc.analysis.studies import run_study, show

section = run_study("adaptive", results_dir, archive_dir, plan_path, tables_dir, figures_dir)
show(section)

# %% [markdown]
# The findings this study contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
