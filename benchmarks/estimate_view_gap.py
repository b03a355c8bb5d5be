"""How much of predicted_ttft's routing rests on the estimated cache view's errors (issue 29).

The router's estimated view (cache/chain_index.py, cache/tier_index.py: every routed prompt
recorded for its instance, an LRU per instance sized by the engine's KV blocks, tiers below
it) can believe a prefix is in HBM that the engine has evicted. In the simulator the exact
view (`policy.cache_view: exact`) keeps its map from the engines' own KV events, so it knows
what each instance holds when routing reads it. Running the same cells with both views asks
whether the estimate's errors cost a tier-aware router anything, and in particular whether
they explain predicted_ttft's TraceLab x2 host-tier gap to sticky_least_loaded (which reads
no view; docs/kv_tiers/study_followups.md, "Why predicted_ttft trails stickiness on TraceLab").

Cells: the tiers study's two traces at their higher load (benchmarks/pause_aware.py
`confirm_cells`: TraceLab x2 over its 11 session-jitter seeds, Mooncake x0.2 over its three
20-minute windows), HBM only and with a 16 GiB host tier. Per run: TTFT p90, the HBM hit rate
and the estimate's error as shares of prompt tokens (the view's expected HBM hit on the chosen
instance against the engine's, over-predicted and under-predicted apart). Paired over the
cell's replicates (agentic_kvc.paired): predicted_ttft exact vs estimated, each against
sticky_least_loaded, and dynamo_kv exact vs estimated.

    nice -n 10 .venv/bin/python benchmarks/estimate_view_gap.py \\
        --out results/bench/estimate_view_gap.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import polars as pl
from pause_aware import (
    confirm_cells,
    estimate_error,
    paired_frame,
    run_in_cell,
)  # a sibling script (benchmarks/ is on the path)

from agentic_kvc.config import override_item
from agentic_kvc.io import atomic_write_json
from agentic_kvc.paired import paired_compare
from agentic_kvc.runs import hardware_info

# variant -> (policy, extra overrides)
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "predicted_ttft": ("predicted_ttft", []),
    "predicted_ttft_exact": ("predicted_ttft", ["policy.cache_view=exact"]),
    "dynamo_kv": ("dynamo_kv", []),
    "dynamo_kv_exact": ("dynamo_kv", ["policy.cache_view=exact"]),
    "sticky_least_loaded": ("sticky_least_loaded", []),
}
COMPARE = [
    ("predicted_ttft", "predicted_ttft_exact"),
    ("sticky_least_loaded", "predicted_ttft"),
    ("sticky_least_loaded", "predicted_ttft_exact"),
    ("dynamo_kv", "dynamo_kv_exact"),
]
METRICS = ("ttft_p90", "e2e_p90", "hit_rate")
HOSTS = [0.0, 16.0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cells", default="tracelab_x2,mooncake_x0.2")
    args = ap.parse_args()
    wanted = args.cells.split(",")
    cells = [c for c in confirm_cells() if c[0] in wanted]
    if len(cells) != len(wanted):
        known = [c[0] for c in confirm_cells()]
        ap.error(f"--cells: unknown {sorted(set(wanted) - set(known))}; known: {known}")
    t0 = time.monotonic()
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    for name, base, sets, _hosts, key, reps in cells:
        for host in HOSTS:
            frames = []
            for variant, (policy, extra) in VARIANTS.items():
                for i, rep in enumerate(reps):
                    rows, info = run_in_cell(
                        base, sets, policy, host, override_item(key, rep), extra
                    )
                    row = {
                        "workload": name,
                        "host_gib": host,
                        "variant": variant,
                        "replicate": rep,
                        "ttft_p90_s": info["ttft_p90_s"],
                        "hbm_token_share": info["hbm_token_share"],
                        "cpu_s": info["cpu_s"],
                        **{k: v for k, v in estimate_error(rows).items() if k != "share"},
                    }
                    runs.append(row)
                    print(row, flush=True)
                    frames.append(paired_frame(rows, variant, i, info["instances"]))
            frame = pl.concat(frames)
            for b, cand in COMPARE:
                for metric in METRICS:
                    r = paired_compare(frame, b, cand, metric).to_row()
                    r.update(workload=name, host_gib=host)
                    comparisons.append(r)
                    print(
                        f"{name} host {host:g} {cand} vs {b} {metric}: {100 * r['rel_diff']:+.1f}%"
                        f" [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]",
                        flush=True,
                    )
    atomic_write_json(
        args.out,
        {
            "benchmark": "estimate_view_gap",
            "command": f"benchmarks/estimate_view_gap.py --cells {args.cells}",
            "machine": hardware_info(),
            "parameters": {"cells": wanted, "hosts_gib": HOSTS, "variants": VARIANTS},
            "paired": "agentic_kvc.paired.paired_compare, 95% two-level bootstrap over the "
            "cell's replicates",
            "wall_s": round(time.monotonic() - t0, 1),
            "runs": runs,
            "comparisons": comparisons,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
