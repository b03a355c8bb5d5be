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
# # EPD: encode / prefill-decode disaggregation (simulation)
#
# A report section from the records `python -m agentic_kvc.epd.bench` writes under
# `results/epd/` (Snakemake rule `epd_bench`). The analysis lives in
# `agentic_kvc.analysis.studies.epd`; docs/epd.md describes the model and its limits.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_epd"
figures_dir = "results/figures/study_epd"

# %%
from pathlib import Path

from agentic_kvc.analysis.studies import epd, show

# Real CPU rows are a hand-run measurement (four engines, ~2-5 min): this checkout's own when
# it has one, else the archived run (results/archive/epd_real/).
real = Path(results_dir) / "epd_real"
if not (real / "summary.json").is_file():
    real = Path(archive_dir) / "epd_real"
section = epd.analyse(
    Path(results_dir) / "epd", real=real, figures=Path(figures_dir), root=Path.cwd()
)
section.write(tables_dir)
show(section)
