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
# # Instrument: Counterfactual regret of routing decisions
#
# A report section from `results/instruments/regret.jsonl`, which
# `akvc instruments config/instruments.yaml` writes (Snakemake rule `instruments`). The
# analysis lives in `agentic_kvc.analysis.studies.regret`; docs/instruments.md describes the
# instrument and how to run it on any run directory (`akvc regret|cache-error|routers`).

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_regret"
figures_dir = "results/figures/study_regret"

# %%
from pathlib import Path

from agentic_kvc.analysis.studies import regret, show

section = regret.analyse(
    Path(results_dir) / "instruments" / "regret.jsonl", Path(figures_dir), Path.cwd()
)
section.write(tables_dir)
show(section)

# %% [markdown]
# The findings this section contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
