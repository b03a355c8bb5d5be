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
# # Study: Elastic offload against load
#
# As load grows from idle to saturated, what share of HEAVY requests does elastic offload move
# to a peer, for which reasons, and how does its TTFT compare with always and never
# offloading? Does the design's expectation (most offloaded at low load, about half at medium,
# almost none saturated) hold?
#
# The analysis lives in `agentic_kvc.analysis.studies.elastic_load` (the same code whether this runs
# interactively or under papermill); this notebook runs it over the study's complete runs,
# writes the report section (`section.md`, `findings.json`) to `tables_dir` and figures to
# `figures_dir`, and shows the result.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_elastic_load"
figures_dir = "results/figures/study_elastic_load"

# %%
from agentic_kvc.analysis.studies import run_study, show

section = run_study("elastic_load", results_dir, archive_dir, plan_path, tables_dir, figures_dir)
show(section)

# %% [markdown]
# The findings this study contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
