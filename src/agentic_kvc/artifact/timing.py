"""Declared compute minutes of each claim against Snakemake's `benchmark:` records.

A claim's measured time is the wall time of the jobs that made its runs (one record per real
run or batch of real runs, one per simulated batch) plus its own evaluation, from the records
the last run left under results/benchmarks/. A claim measured at more than twice its declared
minutes is flagged. Runs shared between claims count for each claim (what a reviewer
rebuilding that claim alone pays).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.analysis.experiments import read_plan
from agentic_kvc.analysis.studies.base import md_table
from agentic_kvc.artifact.registry import Registry

FLAG_RATIO = 2.0


@dataclass(slots=True)
class Timing:
    claim_id: str
    declared_min: float
    measured_min: float | None  # None: no benchmark record for some job of the claim
    missing: int

    @property
    def flagged(self) -> bool:
        return self.measured_min is not None and self.measured_min > FLAG_RATIO * self.declared_min


def _seconds(path: Path) -> float | None:
    if not path.is_file():
        return None
    with path.open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return float(rows[-1]["s"]) if rows else None


def measure(registry: Registry, plan_path: Path, results: Path, sim_batch: int) -> list[Timing]:
    plan = read_plan(plan_path)
    batches = {**plan.sim_batches(sim_batch), **plan.real_batches()}
    batch_of = {r.run_id: name for name, runs in batches.items() for r in runs}
    bench = results / "benchmarks"
    out = []
    for c in registry.claims:
        files = {bench / "claims" / f"{c.id}.tsv"}
        for r in plan.runs:
            if r.experiment not in c.experiments or r.archived:
                continue
            if r.run_id in batch_of:
                files.add(bench / "batches" / f"{batch_of[r.run_id]}.tsv")
            else:
                files.add(bench / "runs" / f"{r.run_id}.tsv")
        secs = [_seconds(f) for f in sorted(files)]
        missing = sum(s is None for s in secs)
        total = None if missing else sum(s for s in secs if s is not None) / 60
        out.append(Timing(c.id, float(c.spec["minutes"]["compute"]), total, missing))
    return out


def timing_table(rows: list[Timing]) -> str:
    def cell(t: Timing) -> str:
        if t.measured_min is None:
            return f"- ({t.missing} job records missing)"
        return f"{t.measured_min:.1f}" + (" FLAG >2x" if t.flagged else "")

    return md_table(
        ["claim", "declared compute (min)", "measured (min)"],
        [[t.claim_id, f"{t.declared_min:g}", cell(t)] for t in rows],
    )
