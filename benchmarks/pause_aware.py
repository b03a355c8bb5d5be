"""Pause-aware KV placement vs fixed-TTL retention vs none, paired (issue 29 item 4).

On the tiers study's heavy-tailed agentic workload (config/config.yaml `tiers_agentic_hi`:
agentic-long, 4 x H20, 60 sessions at 0.1 sessions/s, 20% of tool pauses from the Pareto tail)
with a 16 and a 128 GiB host tier per GPU, routed by `predicted_ttft`, three placements:

- `none`: vLLM's plain LRU (finished requests' blocks join the free queue's tail; lazy offload);
- `ttl30`: every turn that ends in a tool call holds its KV in HBM for 30 s
  (`sim.kv_retention_ttl_s=30`, the better of 30 / 120 s in docs/policies.md);
- `pause`: pause-aware (`sim.pause_aware=true`, defaults untuned: keep up to 30 s, hold for
  the predicted pause's 0.8 quantile, demote when the predicted median exceeds 30 s, and
  demote a hold that expires);
- `pause_keep`: its keep half alone (`sim.pause_demote=false`): per-session hold times, a
  predicted long pause or an expired hold released as vLLM releases (an ablation, added
  after `pause` was measured).

And a held-out workload the defaults were not looked at on: agentic-long with another pause
distribution (median 15 s, sigma 1.5, 5% tail) and a 16 GiB host tier. Each pair of
placements is compared on the same seeds (agentic_kvc.paired.paired_compare: 95% two-level
bootstrap over seeds, then requests) on TTFT p50 / p90, E2E p90 and the HBM hit rate.

    .venv/bin/python benchmarks/pause_aware.py --out results/bench/pause_aware.json
    .venv/bin/python benchmarks/pause_aware.py --seeds 0 --workloads agentic_hi  # quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.paired import paired_compare, request_frame
from agentic_kvc.runs import hardware_info
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "config" / "runs" / "sim_h20_agentic_long.yaml"
HI = [  # config/config.yaml tiers_agentic_hi
    "fleet.instances=4",
    "workload.generator.sessions=60",
    "workload.generator.params.tool_wait_tail_prob=0.2",
    "workload.generator.params.session_rate_per_s=0.1",
]
# name -> (overrides, host GiB per GPU)
WORKLOADS: dict[str, tuple[list[str], list[float]]] = {
    "agentic_hi": (HI, [16, 128]),
    "held_out_slow_tools": (
        [
            *HI[:2],
            "workload.generator.params.session_rate_per_s=0.1",
            "workload.generator.params.tool_wait_median_s=15",
            "workload.generator.params.tool_wait_sigma=1.5",
            "workload.generator.params.tool_wait_tail_prob=0.05",
        ],
        [16],
    ),
}
PLACEMENTS = {
    "none": [],
    "ttl30": ["sim.kv_retention_ttl_s=30"],
    "pause": ["sim.pause_aware=true"],
    "pause_keep": ["sim.pause_aware=true", "sim.pause_demote=false"],
}
COMPARE = [
    ("none", "pause"),
    ("ttl30", "pause"),
    ("none", "ttl30"),
    ("none", "pause_keep"),
    ("ttl30", "pause_keep"),
    ("pause_keep", "pause"),
]
METRICS = ("ttft_p50", "ttft_p90", "e2e_p90", "hit_rate")


def run_one(sets: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    config = load_config(BASE, sets)
    workload = load_workload(config.workload, config.seed)
    fleet = SimFleet(config, workload, profile_for(config))
    t0 = time.process_time()
    fleet.run()
    cpu = time.process_time() - t0
    rows = [r.to_dict() for r in fleet.records]
    n_in = sum(r["input_tokens"] or 0 for r in rows)
    demoted = {"turn_end": 0, "expired": 0}
    for inst in fleet.instances:
        for k, v in inst.demoted.items():
            demoted[k] += v
    info = {
        "cpu_s": cpu,
        "requests": len(rows),
        "errors": sum(1 for r in rows if r.get("error")),
        "hbm_token_share": sum(r["cached_tokens"] or 0 for r in rows) / n_in,
        "host_token_share": sum(r.get("host_tokens") or 0 for r in rows) / n_in,
        "reloads": fleet.stats.reloads,
        "demoted": demoted,
        "holds_released": {
            k: sum(i.retained_releases[k] for i in fleet.instances)
            for k in ("reused", "expired", "reclaimed")
        },
    }
    return rows, info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/pause_aware.json"))
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--policy", default="predicted_ttft")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    names = args.workloads.split(",")
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        ap.error(f"--workloads: unknown {unknown}; known: {sorted(WORKLOADS)}")
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    t_start = time.time()
    for name in names:
        sets, hosts = WORKLOADS[name]
        for host in hosts:
            frames = []
            for placement, extra in PLACEMENTS.items():
                for seed in seeds:
                    run_sets = [
                        *sets,
                        f"policy.name={args.policy}",
                        f"fleet.kv_tiers.host_gib={host}",
                        f"seed={seed}",
                        *extra,
                    ]
                    rows, info = run_one(run_sets)
                    ttfts = sorted(r["ttft_s"] for r in rows if r.get("ttft_s") is not None)
                    info.update(
                        workload=name, host_gib=host, placement=placement, seed=seed, sets=run_sets
                    )
                    info["ttft_p90_s"] = ttfts[int(0.9 * (len(ttfts) - 1))] if ttfts else None
                    runs.append(info)
                    print(
                        f"{name} host {host:g} {placement:6s} seed {seed}: TTFT p90 ~"
                        f"{info['ttft_p90_s']:.2f} s, HBM {info['hbm_token_share']:.3f}, host "
                        f"{info['host_token_share']:.3f}, demoted {info['demoted']}, "
                        f"{info['cpu_s']:.1f} s CPU",
                        flush=True,
                    )
                    df = request_frame(rows).with_columns(
                        pl.lit(placement).alias("variant"),
                        pl.lit(seed).alias("seed"),
                        pl.lit(4).alias("instances"),
                    )
                    frames.append(df)
            frame = pl.concat(frames)
            for base, cand in COMPARE:
                for metric in METRICS:
                    r = paired_compare(frame, base, cand, metric).to_row()
                    r.update(workload=name, host_gib=host)
                    comparisons.append(r)
                    print(
                        f"  {cand} vs {base} {metric}: {r['baseline_value']:.4g} -> "
                        f"{r['candidate_value']:.4g} ({100 * r['rel_diff']:+.1f}%, 95% CI "
                        f"{100 * r['ci_low']:+.1f}..{100 * r['ci_high']:+.1f}%)",
                        flush=True,
                    )
    out = {
        "benchmark": "pause_aware",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": hardware_info(),
        "parameters": {
            "base": str(BASE.relative_to(REPO)),
            "workloads": {n: WORKLOADS[n][0] for n in names},
            "host_gib": {n: WORKLOADS[n][1] for n in names},
            "placements": PLACEMENTS,
            "policy": args.policy,
            "seeds": seeds,
            "paired": "agentic_kvc.paired.paired_compare, 95% two-level bootstrap "
            "(seeds, requests)",
        },
        "runs": runs,
        "comparisons": comparisons,
        "wall_s": time.time() - t_start,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
