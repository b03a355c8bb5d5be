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
# # Instrument: Cache-view error across tool pauses
#
# A report section from `results/instruments/cache_view.jsonl`, which
# `akvc instruments config/instruments.yaml` writes (Snakemake rule `instruments`). The
# analysis lives in `agentic_kvc.analysis.studies.cache_view`; docs/instruments.md describes the
# instrument and how to run it on any run directory (`akvc regret|cache-error|routers`).

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_cache_view"
figures_dir = "results/figures/study_cache_view"

# %%
from pathlib import Path

from agentic_kvc.analysis.studies import cache_view, show

section = cache_view.analyse(
    Path(results_dir) / "instruments" / "cache_view.jsonl",
    Path(figures_dir),
    Path.cwd(),
    real=Path(results_dir) / "bench" / "cache_view_real.json",  # hand-run, when present
)
section.write(tables_dir)
show(section)

# %% [markdown]
# The findings this section contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
