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
# # Study: KV retention across tool pauses
#
# If a session's KV is held for a TTL after a turn that ends in a tool call, how do prefix hit
# rate and TTFT change with the TTL and with the tool-pause distribution?
#
# The analysis lives in `agentic_kvc.analysis.studies.retention` (the same code whether this
# runs interactively or under papermill); this notebook runs it over the study's complete runs,
# writes the report section (`section.md`, `findings.json`) to `tables_dir`, and shows it.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_retention"
figures_dir = "results/figures/study_retention"

# %%
from agentic_kvc.analysis.studies import run_study, show

section = run_study("retention", results_dir, archive_dir, plan_path, tables_dir, figures_dir)
show(section)

# %% [markdown]
# The findings this study contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
