"""KV tiers in the simulator: their cost in CPU time, and what they do to TTFT (issue 29).

Runs each scenario twice on the same workload, HBM only and with `fleet.kv_tiers` set
(default: a 128 GiB host tier per GPU), in this process, and times `SimFleet.run` alone
(process CPU time, best of --repeats, the three variants' repeats interleaved: other jobs
share the cores; workload generation excluded). The goal: tiers on take at most 1.5x the
CPU time of the same run without. Each row also carries TTFT p90 and where prompt tokens
came from, HBM-only vs with tiers.

    .venv/bin/python benchmarks/sim_tiers_overhead.py --out results/bench/sim_tiers_overhead.json
    .venv/bin/python benchmarks/sim_tiers_overhead.py --seeds 0 --policies round_robin  # quick
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

import agentic_kvc.sim.fleet as sim_fleet
from agentic_kvc.config import KVTiersConfig, load_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.runs import hardware_info
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
GOAL = 1.5
CONFIGS = {
    "agentic_long": REPO / "config" / "runs" / "sim_h20_agentic_long.yaml",
    "agentic": REPO / "config" / "runs" / "sim_h20_agentic.yaml",
}
# An HGX H20 / H100 node commonly has 2 TB of DRAM for 8 GPUs: 128 GiB per GPU for KV leaves
# the other half to the host (docs/kv_tiers.md).
TIERS = ["fleet.kv_tiers.host_gib=128"]


@contextmanager
def router_without_tiers() -> Iterator[None]:
    """The router's estimated view built as without tiers (the plain HBM index), so that a
    run's time splits into the engine's tiers and the router's tier model (cache/tier_index.py).
    Routing can then differ, so only the time of such a run is reported."""
    orig = sim_fleet.estimated_view

    def plain(n: int, blocks: int, bs: int, _tiers: Any, kv_bytes: int, hw: str, *_: Any) -> Any:
        return orig(n, blocks, bs, KVTiersConfig(), kv_bytes, hw)

    sim_fleet.estimated_view = plain  # type: ignore[assignment]
    try:
        yield
    finally:
        sim_fleet.estimated_view = orig  # type: ignore[assignment]


def run_once(
    config: Any, workload: Any, profile: Any, plain_router: bool
) -> tuple[float, float, Any]:
    """One run: its process CPU time, wall time and fleet (`plain_router`: the router's view
    built as without tiers)."""
    with router_without_tiers() if plain_router else nullcontext():
        c0, w0 = time.process_time(), time.perf_counter()
        fleet = SimFleet(config, workload, profile)
        fleet.run()
        return time.process_time() - c0, time.perf_counter() - w0, fleet


def measure_pair(
    config_path: Path, sets: list[str], tiers: list[str], repeats: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """HBM only and with tiers (and, with the estimated view, the engine's tiers alone), the
    repeats interleaved (off, on, engine-only, off, ...) so that a burst of load on the
    shared cores falls on all three alike; best CPU time of each."""
    variants = []
    for v_sets, plain in ((sets, False), ([*sets, *tiers], False), ([*sets, *tiers], True)):
        config = load_config(config_path, v_sets)
        if plain and not (
            config.fleet.kv_tiers.enabled and config.policy.cache_view == "estimated"
        ):
            continue
        variants.append(
            (config, load_workload(config.workload, config.seed), profile_for(config), plain)
        )
    cpu: list[list[float]] = [[] for _ in variants]
    wall: list[list[float]] = [[] for _ in variants]
    fleets: list[Any] = [None] * len(variants)
    for _ in range(repeats):
        for k, (config, workload, profile, plain) in enumerate(variants):
            c, w, fleet = run_once(config, workload, profile, plain)
            cpu[k].append(c)
            wall[k].append(w)
            if not plain:
                fleets[k] = fleet
    engine_cpu = min(cpu[2]) if len(variants) == 3 else None
    off = summary(fleets[0], min(cpu[0]), min(wall[0]), None)
    on = summary(fleets[1], min(cpu[1]), min(wall[1]), engine_cpu)
    return off, on


def summary(fleet: Any, cpu: float, wall: float, engine_cpu: float | None) -> dict[str, Any]:
    stats = fleet.stats
    recs = [r for r in fleet.records if r.ttft_s is not None]
    ttft = np.array([r.ttft_s for r in recs])
    total = sum(r.input_tokens for r in recs) or 1
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        # the same run with the router's view as without tiers: the engine's tiers alone
        "engine_tiers_only_cpu_s": engine_cpu,
        "requests": len(fleet.records),
        "errors": sum(1 for r in fleet.records if r.error),
        "events": stats.events,
        "simulated_s": stats.sim_s,
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p90_s": float(np.percentile(ttft, 90)),
        "hbm_token_share": sum(r.cached_tokens for r in recs) / total,
        "host_token_share": sum(r.host_tokens or 0 for r in recs) / total,
        "disk_token_share": sum(r.disk_tokens or 0 for r in recs) / total,
        "reloads": stats.reloads,
        "reload_wait_mean_s": stats.reload_s / stats.reloads if stats.reloads else 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/sim_tiers_overhead.json"))
    ap.add_argument("--configs", default="agentic_long,agentic")
    ap.add_argument("--policies", default="round_robin,sglang_cache_aware")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tiers", action="append", default=[], help="tier --set (repeatable)")
    args = ap.parse_args()
    tiers = args.tiers or TIERS
    unknown = sorted(set(args.configs.split(",")) - set(CONFIGS))
    if unknown:
        ap.error(f"--configs: unknown {unknown}; known: {sorted(CONFIGS)}")
    rows = []
    for name in args.configs.split(","):
        for policy in args.policies.split(","):
            for seed in [int(s) for s in args.seeds.split(",")]:
                sets = [f"policy.name={policy}", f"seed={seed}"]
                off, on = measure_pair(CONFIGS[name], sets, tiers, args.repeats)
                row = {
                    "config": name,
                    "policy": policy,
                    "seed": seed,
                    "hbm_only": off,
                    "tiers": on,
                    "cpu_ratio": on["cpu_s"] / off["cpu_s"],
                    "engine_cpu_ratio": (on["engine_tiers_only_cpu_s"] or on["cpu_s"])
                    / off["cpu_s"],
                    "ttft_p90_change": on["ttft_p90_s"] / off["ttft_p90_s"] - 1,
                }
                rows.append(row)
                print(
                    f"{name:13s} {policy:19s} seed {seed}: CPU {off['cpu_s']:6.2f} s -> "
                    f"{on['cpu_s']:6.2f} s (x{row['cpu_ratio']:.2f}; engine's tiers alone "
                    f"x{row['engine_cpu_ratio']:.2f}); TTFT p90 "
                    f"{off['ttft_p90_s']:7.2f} -> {on['ttft_p90_s']:7.2f} s "
                    f"({100 * row['ttft_p90_change']:+.0f}%), host share "
                    f"{on['host_token_share']:.2f}"
                )
    worst = max(r["cpu_ratio"] for r in rows)
    out = {
        "benchmark": "sim_tiers_overhead",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": hardware_info(),
        "parameters": {
            "configs": {n: str(CONFIGS[n].relative_to(REPO)) for n in args.configs.split(",")},
            "tiers": tiers,
            "repeats": args.repeats,
            "timed": "best process CPU time of SimFleet.run over the repeats, the runs "
            "without tiers, with tiers and with the engine's tiers alone interleaved",
            "goal_cpu_ratio": GOAL,
        },
        "results": rows,
        "max_cpu_ratio": worst,
        "median_cpu_ratio": float(np.median([r["cpu_ratio"] for r in rows])),
        "max_engine_cpu_ratio": max(r["engine_cpu_ratio"] for r in rows),
        "median_engine_cpu_ratio": float(np.median([r["engine_cpu_ratio"] for r in rows])),
        "pass": worst <= GOAL,
    }
    atomic_write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
