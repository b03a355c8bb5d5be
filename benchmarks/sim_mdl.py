"""Closed-form check: simulated mean queueing delay vs M/D/1 (issue 7 acceptance).

One instance, max_num_seqs 1, fixed-size requests (one step of S = 0.1 s), Poisson arrivals at
loads 0.3, 0.6, 0.9. Pass: |Wq_sim / Wq_MD1 - 1| < 5% at every load. The wait at 0.9 is highly
autocorrelated, so that load gets many more requests.

    .venv/bin/python benchmarks/sim_mdl.py --out results/bench/sim_mdl.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from agentic_kvc.io import atomic_write_json
from agentic_kvc.runs import hardware_info
from agentic_kvc.sim.mdl import mdl_check

REQUESTS = {0.3: 100_000, 0.6: 100_000, 0.9: 400_000}
TOLERANCE = 0.05


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/sim_mdl.json"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    args = ap.parse_args()
    rows = []
    for load, n in REQUESTS.items():
        t0 = time.perf_counter()
        row = mdl_check(load, max(int(n * args.scale), 1000), seed=args.seed)
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        row["pass"] = abs(row["rel_error"]) < TOLERANCE
        rows.append(row)
        print(
            f"load {load}: Wq sim {row['wq_sim_s']:.4f} s vs M/D/1 {row['wq_mdl_s']:.4f} s "
            f"({row['rel_error']:+.2%}), {row['requests']} requests, {row['wall_s']} s"
        )
    out = {
        "benchmark": "sim_mdl",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": hardware_info(),
        "parameters": {
            "seed": args.seed,
            "service_s": 0.1,
            "tolerance": TOLERANCE,
            "max_num_seqs": 1,
            "instances": 1,
            "warmup_fraction": 0.01,
        },
        "results": rows,
        "pass": all(r["pass"] for r in rows),
    }
    atomic_write_json(args.out, out)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
