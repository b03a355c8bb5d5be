"""A waiting request's cached prefix made most recent when it arrives (sim.refresh_on_arrival).

vLLM leaves a waiting request's prefix hit where it is in the free queue until the request is
scheduled, so the requests admitted ahead of it can evict it: on TraceLab 21-28% of
predicted_ttft's decisions lose prefix blocks that way, and those requests are the slow ones
(benchmarks/queued_prefix_loss.py; docs/kv_tiers/study_followups.md, "Prefixes lost while
queued", reading (b): the loss is the engine's, not one a router can route around). The
engine-side remedy costs one prefix lookup per arrival and has no parameter: move the hit's
free blocks to the free queue's tail when the request arrives (`BlockPool.refresh`). This runs
every router with it off and on, paired by replicate, on the tiers study's cells and on cells
no rule here was tuned on, HBM only and with a 16 GiB host tier. The pre-registered rule is in
docs/kv_tiers/study_followups.md ("Refreshing a waiting request's prefix").

    nice -n 10 .venv/bin/python benchmarks/refresh_on_arrival.py \\
        --out results/bench/refresh_on_arrival.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import polars as pl
from pause_aware import paired_frame, run_in_cell  # sibling scripts (benchmarks/ is on the path)
from tiers_sweep import WINDOWS, study

from agentic_kvc.config import override_item
from agentic_kvc.io import atomic_write_json
from agentic_kvc.paired import paired_compare
from agentic_kvc.runs import hardware_info

REPO = Path(__file__).resolve().parents[1]
POLICIES = ["predicted_ttft", "sticky_least_loaded", "dynamo_kv", "round_robin"]
VARIANTS = {"off": [], "refresh": ["sim.refresh_on_arrival=true"]}
METRICS = ("ttft_p90", "e2e_p90", "hit_rate")
HOSTS = [0.0, 16.0]
SEEDS_TRACE = ("seed", list(range(11)))  # the session jitter's realisations
SEEDS_GEN = ("seed", list(range(5)))
MOONCAKE_WINDOWS = ("workload.window_s", WINDOWS)
# name -> (the tiers study's experiment, extra overrides, replicates); "new_": cells no rule in
# this file's sections was run on before (docs/kv_tiers/study_followups.md).
CELLS: dict[str, tuple[str | None, dict[str, Any], tuple[str, list[Any]]]] = {
    "tracelab_x1": ("tiers_tracelab_lo", {}, SEEDS_TRACE),
    "tracelab_x2": ("tiers_tracelab_hi", {}, SEEDS_TRACE),
    "mooncake_x0.1": ("tiers_mooncake_lo", {}, MOONCAKE_WINDOWS),
    "mooncake_x0.2": ("tiers_mooncake_hi", {}, MOONCAKE_WINDOWS),
    "agentic-long_0.05": ("tiers_agentic_lo", {}, SEEDS_GEN),
    "agentic-long_0.1": ("tiers_agentic_hi", {}, SEEDS_GEN),
    "new_tracelab_x1.5": ("tiers_tracelab_hi", {"workload.rate_scale": 1.5}, SEEDS_TRACE),
    "new_mooncake_x0.15": ("tiers_mooncake_lo", {"workload.rate_scale": 0.15}, MOONCAKE_WINDOWS),
    "new_agentic-long_8xH20_0.2": (
        "tiers_agentic_hi",
        {"fleet.instances": 8, "workload.generator.params.session_rate_per_s": 0.2},
        SEEDS_GEN,
    ),
    "new_agentic-coding_0.75": (
        None,  # the `agentic-coding` preset, 8 x H20
        {"workload.generator.params.session_rate_per_s": 0.75},
        SEEDS_GEN,
    ),
}


def cell_config(name: str) -> tuple[Path, list[str], str, list[Any]]:
    """(base config, overrides, replicate key, its values) of a cell."""
    exp_name, extra, (key, reps) = CELLS[name]
    if exp_name is None:
        base, sets = REPO / "config" / "runs" / "sim_h20_agentic.yaml", {}
    else:
        exp = study(exp_name)
        base, sets = REPO / exp["base"], dict(exp["set"])
    sets.update(extra)
    return base, [override_item(k, v) for k, v in sets.items()], key, reps


def verdict(comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    """The pre-registered rule: it helps if TTFT p90 is significantly lower for some (cell,
    host, router) and neither TTFT p90 nor E2E p90 is significantly higher for any."""

    def where(c: dict[str, Any]) -> str:
        return f"{c['workload']}/host_{c['host_gib']:g}/{c['policy']}/{c['metric']}"

    sig = [c for c in comparisons if c["significant"]]
    lower = [where(c) for c in sig if c["metric"] == "ttft_p90" and c["rel_diff"] < 0]
    higher = [where(c) for c in sig if c["metric"] in ("ttft_p90", "e2e_p90") and c["rel_diff"] > 0]
    return {"helps": bool(lower) and not higher, "ttft_p90_lower": lower, "higher": higher}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--policies", default=",".join(POLICIES))
    args = ap.parse_args()
    wanted = args.cells.split(",")
    unknown = sorted(set(wanted) - set(CELLS))
    if unknown:
        ap.error(f"--cells: unknown {unknown}; known: {list(CELLS)}")
    policies = args.policies.split(",")
    t0 = time.monotonic()
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    for name in wanted:
        base, sets, key, reps = cell_config(name)
        for host in HOSTS:
            for policy in policies:
                frames = []
                for variant, extra in VARIANTS.items():
                    for i, rep in enumerate(reps):
                        rows, info = run_in_cell(
                            base, sets, policy, host, override_item(key, rep), extra
                        )
                        row = {
                            "workload": name,
                            "host_gib": host,
                            "policy": policy,
                            "variant": variant,
                            "replicate": rep,
                            "ttft_p90_s": info["ttft_p90_s"],
                            "hbm_token_share": info["hbm_token_share"],
                            "host_token_share": info["host_token_share"],
                            "refreshed_blocks": info["demoted"]["refreshed_on_arrival"],
                            "cpu_s": round(info["cpu_s"], 3),
                        }
                        runs.append(row)
                        frames.append(paired_frame(rows, variant, i, info["instances"]))
                frame = pl.concat(frames)
                for metric in METRICS:
                    r = paired_compare(frame, "off", "refresh", metric).to_row()
                    r.update(workload=name, host_gib=host, policy=policy)
                    comparisons.append(r)
                    print(
                        f"{name} host {host:g} {policy} {metric}: {100 * r['rel_diff']:+.1f}%"
                        f" [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]",
                        flush=True,
                    )
    result = verdict(comparisons)
    print(result, flush=True)
    atomic_write_json(
        args.out,
        {
            "benchmark": "refresh_on_arrival",
            "command": "benchmarks/refresh_on_arrival.py"
            f" --cells {args.cells} --policies {args.policies}",
            "machine": hardware_info(),
            "parameters": {
                "cells": {n: CELLS[n] for n in wanted},
                "hosts_gib": HOSTS,
                "policies": policies,
                "variants": VARIANTS,
            },
            "paired": "agentic_kvc.paired.paired_compare, 95% two-level bootstrap over the "
            "cell's replicates; refresh vs off",
            "wall_s": round(time.monotonic() - t0, 1),
            "verdict": result,
            "runs": runs,
            "comparisons": comparisons,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
