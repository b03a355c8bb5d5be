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
# # Instrument: Several routers at once
#
# A report section from `results/instruments/routers.jsonl`, which
# `akvc instruments config/instruments.yaml` writes (Snakemake rule `instruments`). The
# analysis lives in `agentic_kvc.analysis.studies.routers`; docs/instruments.md describes the
# instrument and how to run it on any run directory (`akvc regret|cache-error|routers`).
# The real-engine table (1 vs 2 proxies, `akvc routers-real`) is read from
# `results/bench/routers_real.json` when that hand-run benchmark was run.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_routers"
figures_dir = "results/figures/study_routers"

# %%
from pathlib import Path

from agentic_kvc.analysis.studies import routers, show

# The real-engine comparison is a hand-run benchmark (`akvc routers-real`, ~3 min of engines):
# this checkout's own run when there is one, else the archived run (results/archive/bench/).
real = Path(results_dir) / "bench" / "routers_real.json"
if not real.is_file():
    real = Path(archive_dir) / "bench" / "routers_real.json"
section = routers.analyse(
    Path(results_dir) / "instruments" / "routers.jsonl",
    real=real,
    figures=Path(figures_dir),
    root=Path.cwd(),
)
section.write(tables_dir)
show(section)

# %% [markdown]
# The findings this section contributes to the report's summary:

# %%
for line in section.findings:
    print("-", line)
