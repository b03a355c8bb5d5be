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
# # Microbenchmark: PD transfer lifecycle (real vLLM on CPU, NIXL)
#
# A report section from the per-request records `akvc lifecycle run` writes under
# `results/lifecycle/<grid>/` (Snakemake rule `lifecycle_default` for the report's small
# subset, rule `lifecycle` for the full CPU grid). The analysis lives in
# `agentic_kvc.analysis.studies.lifecycle`; docs/lifecycle.md describes the t-points, the
# wrapper connector and the protocol.

# %% tags=["parameters"]
results_dir = "results"
archive_dir = "results/archive"
plan_path = "results/work/plan.json"
tables_dir = "results/tables/study_lifecycle"
figures_dir = "results/figures/study_lifecycle"
lifecycle_grid = "default"

# %%
import json
from pathlib import Path

from agentic_kvc.analysis.studies import lifecycle, show

records = Path(results_dir) / "lifecycle" / lifecycle_grid
section = lifecycle.analyse(records, Path(figures_dir))
section.write(tables_dir)
show(section)

# %% [markdown]
# The calibration the split decider reads (fitted transfer and colocated-prefill models, with
# the run they come from):

# %%
print(json.dumps(lifecycle.calibration(lifecycle.load_records(records), str(records)), indent=1))

# %%
for line in section.findings:
    print("-", line)
