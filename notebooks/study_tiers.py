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
# # Study: KV tiers across tool pauses
#
# When a fleet's HBM cannot hold every paused agent session, how much TTFT does a host (and
# disk) tier win back, does the router need to know which tier holds a session, and does
# pricing a reload by its time beat the peers' fixed per-tier credits?
#
# The same question on real engines: two tiny-model vLLM CPU instances with a small engine
# KV, HBM only against a host tier (experiments `tiers_real_*`, docs/kv_tiers_real.md), three
# routers, three repeats interleaved, with the engines' own tier counters, the machine's load
# and the simulator's twin beside each row; their tables follow the simulated ones.
#
# The analysis lives in `agentic_kvc.analysis.studies.tiers` (simulated runs) and
# `agentic_kvc.analysis.studies.tiers_real` (real runs), the same code whether this runs
# interactively or under papermill; this notebook runs it over the study's complete runs
# (fresh or archived under `archive_dir`), writes the report section (`section.md`,
# `findings.json`) to `tables_dir`, and shows it.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_tiers"
figures_dir = "results/figures/study_tiers"

# %%
from agentic_kvc.analysis.studies import run_study, show

section = run_study("tiers", results_dir, archive_dir, plan_path, tables_dir, figures_dir)
show(section)

# %% [markdown]
# The findings this study contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
