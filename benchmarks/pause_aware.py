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

`--finish-first`: the pre-registered check of finished sessions first (`sim.finish_first`,
docs/kv_tiers/pause_aware.md): placements `none`, `finish_first`, `ttl30`, `ttl30_finish`, on
both workloads with HBM only as well (host 0, 16, 128 GiB; the held-out one 0 and 16), each
placement paired with the same one without finished-first eviction; routers predicted_ttft
and sticky_least_loaded. `--finish-first --confirm`: its confirmatory check (pre-registered
beside it) on the tiers study's two traces at their higher load, `none` and `finish_first`,
routers predicted_ttft, sticky_least_loaded and dynamo_kv.

`--told` (and `--told --confirm`): the pre-registered check of the router's estimated view told
of those releases (`sim.router_sees_release`, default true) against not told, finished-first
and pause-aware placement, on the --finish-first cells (and traces), routers predicted_ttft and
dynamo_kv; each run also reports the estimate's error (`estimate_error_share`).

    .venv/bin/python benchmarks/pause_aware.py --out results/bench/pause_aware.json
    .venv/bin/python benchmarks/pause_aware.py --seeds 0 --workloads agentic_hi  # quick
    .venv/bin/python benchmarks/pause_aware.py --finish-first  # results/bench/finish_first.json
    .venv/bin/python benchmarks/pause_aware.py --finish-first --confirm
    .venv/bin/python benchmarks/pause_aware.py --told  # results/bench/finish_first_told.json
    .venv/bin/python benchmarks/pause_aware.py --told --confirm
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.config import load_config, override_item
from agentic_kvc.io import atomic_write_json
from agentic_kvc.paired import paired_compare, request_frame
from agentic_kvc.runs import hardware_info
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiers_sweep import study

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
# (name, base config, overrides, host GiB per GPU, replicate key, its values)
Cell = tuple[str, Path, list[str], list[float], str, list[Any]]

# --finish-first (docs/kv_tiers/pause_aware.md, "Finished sessions first"): host GiB per GPU
# per workload, the placements, and the pairs (each placement with and without it).
FF_HOSTS = {"agentic_hi": [0.0, 16.0, 128.0], "held_out_slow_tools": [0.0, 16.0]}
FF_PLACEMENTS = {
    "none": [],
    "finish_first": ["sim.finish_first=true"],
    "ttl30": ["sim.kv_retention_ttl_s=30"],
    "ttl30_finish": ["sim.kv_retention_ttl_s=30", "sim.finish_first=true"],
}
FF_COMPARE = [("none", "finish_first"), ("ttl30", "ttl30_finish")]

# --finish-first --confirm (pre-registered, docs/kv_tiers/pause_aware.md): the tiers study's two
# traces at their higher load, as config/config.yaml sets them; name -> (experiment, host GiB,
# replicate key, its values).
CONFIRM_CELLS: dict[str, tuple[str, list[float], str, list[Any]]] = {
    "mooncake_x0.2": (
        "tiers_mooncake_hi",
        [0.0, 16.0, 128.0],
        "workload.window_s",
        [[0, 600], [600, 1200], [1200, 1800]],
    ),
    "tracelab_x2": ("tiers_tracelab_hi", [0.0, 16.0], "seed", list(range(11))),
}
CONFIRM_PLACEMENTS = {k: FF_PLACEMENTS[k] for k in ("none", "finish_first")}
CONFIRM_COMPARE = [("none", "finish_first")]
CONFIRM_POLICIES = ["predicted_ttft", "sticky_least_loaded", "dynamo_kv"]

# --told (pre-registered, docs/kv_tiers/pause_aware.md, "The router told of the releases"): the
# same placements with the router's estimated view told of the releases (the default) and not
# (`sim.router_sees_release=false`), on the --finish-first cells (and with --confirm, its
# traces); routers that read the estimate (sticky_least_loaded does not: its runs would be
# identical).
UNTOLD = "sim.router_sees_release=false"
TOLD_PLACEMENTS = {
    "finish_first_untold": ["sim.finish_first=true", UNTOLD],
    "finish_first": ["sim.finish_first=true"],
    "pause_untold": ["sim.pause_aware=true", UNTOLD],
    "pause": ["sim.pause_aware=true"],
}
TOLD_COMPARE = [("finish_first_untold", "finish_first"), ("pause_untold", "pause")]
TOLD_CONFIRM_PLACEMENTS = {k: TOLD_PLACEMENTS[k] for k in ("finish_first_untold", "finish_first")}
TOLD_POLICIES = ["predicted_ttft", "dynamo_kv"]


def cells(names: list[str], hosts_of: dict[str, list[float]], seeds: list[int]) -> list[Cell]:
    """The agentic-long workloads (WORKLOADS) as cells, replicated by seed."""
    return [(name, BASE, WORKLOADS[name][0], hosts_of[name], "seed", list(seeds)) for name in names]


def confirm_cells() -> list[Cell]:
    out: list[Cell] = []
    for name, (exp, hosts, key, reps) in CONFIRM_CELLS.items():
        exp_ = study(exp)  # config/config.yaml's base and `set` of that experiment
        sets = [override_item(k, v) for k, v in exp_["set"].items()]
        out.append((name, REPO / exp_["base"], sets, hosts, key, reps))
    return out


def estimate_error(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """How far the router's expected HBM hit on the chosen instance is from the engine's, as
    shares of all prompt tokens (colocated requests): in all (`share`), over-predicted and
    under-predicted apart, and the share of requests over-predicted. None without predictions."""
    n_in = sum(r["input_tokens"] or 0 for r in rows)
    d = [
        r["predicted_cached_tokens"] - (r["cached_tokens"] or 0)
        for r in rows
        if r.get("predicted_cached_tokens") is not None and not r.get("disaggregated")
    ]
    if not d or not n_in:
        return dict.fromkeys(("share", "over_share", "under_share", "requests_over"))
    return {
        "share": sum(abs(x) for x in d) / n_in,
        "over_share": sum(x for x in d if x > 0) / n_in,
        "under_share": -sum(x for x in d if x < 0) / n_in,
        "requests_over": sum(x > 0 for x in d) / len(d),
    }


def run_one(sets: list[str], base: Path = BASE) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    config = load_config(base, sets)
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
    demoted["finished_first"] = sum(inst.finished_first for inst in fleet.instances)
    demoted["refreshed_on_arrival"] = sum(inst.refreshed for inst in fleet.instances)
    info = {
        "instances": config.fleet.instances,
        "estimate_error_share": estimate_error(rows)["share"],
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


def run_in_cell(
    base: Path, sets: list[str], policy: str, host_gib: float, replicate: str, extra: list[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One run of a cell (`run_one`): its overrides, then the policy, the host tier (GiB per
    GPU), the replicate's override and the variant's; its info also carries those overrides
    (`sets`) and the run's TTFT p90 (the order statistic)."""
    run_sets = [
        *sets,
        f"policy.name={policy}",
        f"fleet.kv_tiers.host_gib={host_gib}",
        replicate,
        *extra,
    ]
    rows, info = run_one(run_sets, base)
    ttfts = sorted(r["ttft_s"] for r in rows if r.get("ttft_s") is not None)
    info["sets"] = run_sets
    info["ttft_p90_s"] = ttfts[int(0.9 * (len(ttfts) - 1))] if ttfts else None
    return rows, info


def paired_frame(rows: list[dict[str, Any]], variant: str, replicate: int, instances: int) -> Any:
    """One run's requests as agentic_kvc.paired reads them: labelled with its variant and its
    replicate's index (the `seed` column, what pairs the variants)."""
    return request_frame(rows).with_columns(
        pl.lit(variant).alias("variant"),
        pl.lit(replicate).alias("seed"),
        pl.lit(instances).alias("instances"),
    )


def measure(
    policy: str,
    cell_list: list[Cell],
    placements: dict[str, list[str]],
    compare: list[tuple[str, str]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every (cell, host, placement, replicate) run under `policy`, and the paired
    comparisons of each cell's placements (pairs: the same replicate)."""
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    for name, base, sets, hosts, key, reps in cell_list:
        for host in hosts:
            frames = []
            for placement, extra in placements.items():
                for i, rep in enumerate(reps):
                    rows, info = run_in_cell(
                        base, sets, policy, host, override_item(key, rep), extra
                    )
                    info.update(
                        policy=policy,
                        workload=name,
                        host_gib=host,
                        placement=placement,
                        replicate=rep,
                    )
                    runs.append(info)
                    print(
                        f"{policy} {name} host {host:g} {placement:6s} {key} {rep}: TTFT p90 ~"
                        f"{info['ttft_p90_s']:.2f} s, HBM {info['hbm_token_share']:.3f}, host "
                        f"{info['host_token_share']:.3f}, demoted {info['demoted']}, "
                        f"{info['cpu_s']:.1f} s CPU",
                        flush=True,
                    )
                    frames.append(paired_frame(rows, placement, i, info["instances"]))
            frame = pl.concat(frames)
            for b, cand in compare:
                for metric in METRICS:
                    r = paired_compare(frame, b, cand, metric).to_row()
                    r.update(policy=policy, workload=name, host_gib=host)
                    comparisons.append(r)
                    print(
                        f"  {cand} vs {b} {metric}: {r['baseline_value']:.4g} -> "
                        f"{r['candidate_value']:.4g} ({100 * r['rel_diff']:+.1f}%, 95% CI "
                        f"{100 * r['ci_low']:+.1f}..{100 * r['ci_high']:+.1f}%)",
                        flush=True,
                    )
    return runs, comparisons


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="default results/bench/<benchmark>.json")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument(
        "--policy",
        default=None,
        help="routers, comma-separated (default predicted_ttft; with --finish-first "
        "predicted_ttft,sticky_least_loaded)",
    )
    ap.add_argument(
        "--finish-first",
        action="store_true",
        help="the pre-registered finished-sessions-first check (module docstring)",
    )
    ap.add_argument(
        "--confirm",
        action="store_true",
        help="with --finish-first or --told: its confirmatory check on the tiers study's traces",
    )
    ap.add_argument(
        "--told",
        action="store_true",
        help="the pre-registered check of the router's estimate told of the releases "
        "(finished first, pause-aware) against not told (module docstring)",
    )
    args = ap.parse_args()
    if args.confirm and not (args.finish_first or args.told):
        ap.error("--confirm goes with --finish-first or --told")
    if args.told and args.finish_first:
        ap.error("--told and --finish-first are separate checks")
    benchmark, placements, compare = "pause_aware", PLACEMENTS, COMPARE
    hosts_of = {n: WORKLOADS[n][1] for n in WORKLOADS}
    policies = ["predicted_ttft"]
    if args.finish_first:
        benchmark, placements, compare, hosts_of = (
            "finish_first",
            FF_PLACEMENTS,
            FF_COMPARE,
            FF_HOSTS,
        )
        policies = ["predicted_ttft", "sticky_least_loaded"]
    seeds = [int(s) for s in args.seeds.split(",")]
    names = args.workloads.split(",")
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        ap.error(f"--workloads: unknown {unknown}; known: {sorted(WORKLOADS)}")
    cell_list = cells(names, hosts_of, seeds)
    if args.told:
        benchmark, placements, compare, policies = (
            "finish_first_told",
            TOLD_PLACEMENTS,
            TOLD_COMPARE,
            TOLD_POLICIES,
        )
        cell_list = cells(names, FF_HOSTS, seeds)
    if args.confirm and args.told:
        benchmark, placements, compare = (
            "finish_first_told_confirm",
            TOLD_CONFIRM_PLACEMENTS,
            TOLD_COMPARE[:1],
        )
        cell_list = confirm_cells()
    elif args.confirm:
        benchmark, placements, compare = "finish_first_confirm", CONFIRM_PLACEMENTS, CONFIRM_COMPARE
        cell_list, policies = confirm_cells(), CONFIRM_POLICIES
    if args.policy:
        policies = args.policy.split(",")
    out_path = args.out or Path(f"results/bench/{benchmark}.json")
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    t_start = time.time()
    for policy in policies:
        r, c = measure(policy, cell_list, placements, compare)
        runs += r
        comparisons += c
    out = {
        "benchmark": benchmark,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": hardware_info(),
        "parameters": {
            "cells": [
                {
                    "name": name,
                    "base": str(base.relative_to(REPO)),
                    "set": sets,
                    "host_gib": hosts,
                    "replicates": {key: reps},
                }
                for name, base, sets, hosts, key, reps in cell_list
            ],
            "placements": placements,
            "compare": compare,
            "policies": policies,
            "seeds": seeds,
            "paired": "agentic_kvc.paired.paired_compare, 95% two-level bootstrap "
            "(seeds, requests)",
        },
        "runs": runs,
        "comparisons": comparisons,
        "wall_s": time.time() - t_start,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_path, out)
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
