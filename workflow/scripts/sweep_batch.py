"""One batch of a policy sweep: every policy of one (scenario, seed), as one pipeline job.

The sweeps (benchmarks/policy_robustness.py, benchmarks/policy_misspec.py) run each
(scenario, policy, seed) once and cache its records under --work; run serially they take hours
in one process. workflow/rules/sweeps.smk makes each (scenario, seed) a job that fills that
cache through the benchmark's own `run_one` (so a batch's records are exactly the script's),
and the script's analysis then reads the cache. The marker this writes (JSON) names the files,
the wall time and where the job ran (SLURM job id and node, when under SLURM).

    python workflow/scripts/sweep_batch.py robustness chat 0 --work results/robustness \\
        --out results/sweeps/robustness/chat/seed0.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from agentic_kvc.bench_scripts import load_benchmark

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"  # the pipeline's own copy
SCRIPTS = {"robustness": "policy_robustness", "misspec": "policy_misspec"}


def batch_runs(sweep: str, scenario: str) -> list[tuple[str, list[str], str | None]]:
    """(policy spec, extra overrides, label) of every run of one seed of `scenario`, in the
    order the benchmark itself runs them."""
    rb = load_benchmark("policy_robustness", BENCHMARKS)
    if scenario not in rb.SCENARIOS:
        raise SystemExit(f"unknown scenario {scenario!r}; known: {', '.join(rb.SCENARIOS)}")
    peers: list[tuple[str, list[str], str | None]] = [(p, [], None) for p in rb.PEERS]
    if sweep == "robustness":
        return peers + [(p, [], None) for p in rb.OURS]
    ms = load_benchmark("policy_misspec", BENCHMARKS)
    return peers + [(spec, sets, label) for label, _o, spec, sets in ms.variants(scenario)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("sweep", choices=sorted(SCRIPTS))
    ap.add_argument("scenario")
    ap.add_argument("seed", type=int, help="replicate index (seed i, or trace window i)")
    ap.add_argument("--work", type=Path, required=True, help="the sweep's run cache")
    ap.add_argument("--out", type=Path, required=True, help="the batch's marker (JSON)")
    a = ap.parse_args()
    rb = load_benchmark("policy_robustness", BENCHMARKS)
    t0 = time.perf_counter()
    rows = 0
    runs = batch_runs(a.sweep, a.scenario)
    for spec, sets, label in runs:
        rows += rb.run_one(a.scenario, spec, a.seed, a.work, sets, label).height
    doc = {
        "sweep": a.sweep,
        "scenario": a.scenario,
        "seed": a.seed,
        "runs": len(runs),
        "requests": rows,
        "wall_s": round(time.perf_counter() - t0, 2),
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
