"""How fragmented the simulated engine's offloads are: runs per offload, and how many merge.

docs/kv_tiers/simulator_cost.md, "Cost and effect". The tier store's CPU time (issue 29, goal 3:
tiers on at most 1.5x the run without) is spent per call and per run, not per block (cProfile:
`put`, `walk`, `_no_head`, `_evict`, `_index` each called once or more per run). This counts what
the engine hands its top tier per HBM eviction pass (`InstanceTiers.offload`): the runs, their
sizes, and how many of them continue the run logged just before them, chain-adjacent pieces of one
request that HBM evicted together.

A run continues the previous one when its positions end where the previous one's start (HBM
evicts a request's pieces tail first), both have the same `below` flag, and both were queued
by the same release of a request's blocks (`BlockPool.release` / `release_first`): the pieces
of one block table are consecutive chain positions of one prompt, so such a pair is one chain.
Positionally adjacent pieces of two different releases may belong to two chains and are not
counted as mergeable. The release is recorded by wrapping the pool's methods here (the
simulator itself keeps no such stamp); the run's records are unchanged by the wrapping.

`--merge`: the trial of handing such pairs down as one run (the later piece's list extended
by the earlier's), timed against the same wrapping without it (best process CPU time of
`--repeats`, interleaved), with TTFT p90 both ways. One run keeps one recency where there were
two, so this is a change of the model's granularity, not an equivalent rewrite: the TTFT
columns say by how much it moves the records.

    .venv/bin/python benchmarks/tiers_offload_runs.py --out results/bench/tiers_offload_runs.json
    .venv/bin/python benchmarks/tiers_offload_runs.py --merge --policies round_robin,dynamo_kv \\
        --out results/bench/tiers_offload_merge.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.sim import blocks, tiers
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from sim_tiers_overhead import CONFIGS, TIERS  # noqa: E402
from tiers_sweep import stamp  # noqa: E402


def count_run(
    config_name: str, policy: str, seed: int, merge: bool = False
) -> tuple[dict[str, Any], float, float]:
    """One tiered run's offloads, counted (module docstring); with `merge`, mergeable pairs
    are handed down as one run. Also returns the run's process CPU seconds and TTFT p90."""
    released: dict[int, int] = {}  # id(piece) -> the release that queued it last
    tick = [0]
    log_release: dict[int, list[int]] = {}  # id(evict log) -> release of each entry
    c: Counter[str] = Counter()
    sizes: Counter[int] = Counter()

    pool = blocks.BlockPool
    orig_release, orig_first, orig_uncache = pool.release, pool.release_first, pool._uncache

    def stamp_leaves(table: blocks.BlockTable) -> None:
        tick[0] += 1
        for p in table.pieces:
            for leaf in p.leaves():
                released[id(leaf)] = tick[0]

    def release(self: blocks.BlockPool, table: blocks.BlockTable) -> None:
        stamp_leaves(table)
        orig_release(self, table)

    def release_first(self: blocks.BlockPool, table: blocks.BlockTable) -> None:
        stamp_leaves(table)
        orig_first(self, table)

    def uncache(self: blocks.BlockPool, p: blocks.Piece, lo: int, hi: int) -> None:
        log = self.evict_log
        before = len(log) if log is not None else 0
        orig_uncache(self, p, lo, hi)
        if log is not None and len(log) > before:
            log_release.setdefault(id(log), []).extend(
                [released.get(id(p), -1)] * (len(log) - before)
            )

    orig_offload = tiers.InstanceTiers.offload

    def offload(self: tiers.InstanceTiers, log: list[Any], now: float) -> None:
        rel = log_release.pop(id(log), [-1] * len(log))
        c["offloads"] += 1
        c["runs"] += len(log)
        joins = [False] * len(log)  # entry k continues entry k - 1 and may merge with it
        for k, (lo, hs, below) in enumerate(log):
            c["blocks"] += len(hs)
            sizes[min(len(hs) // 16, 8)] += 1
            if k:
                plo, _phs, pbelow = log[k - 1]
                if lo + len(hs) == plo:
                    c["adjacent"] += 1
                    joins[k] = below == pbelow and rel[k] == rel[k - 1] != -1
        c["mergeable"] += sum(joins)
        c["runs_if_merged"] += len(log) - sum(joins)
        if merge:
            log = merged_log(log, joins)
        orig_offload(self, log, now)

    pool.release, pool.release_first, pool._uncache = release, release_first, uncache  # type: ignore[method-assign]
    tiers.InstanceTiers.offload = offload  # type: ignore[method-assign]
    try:
        config = load_config(
            CONFIGS[config_name], [f"policy.name={policy}", f"seed={seed}", *TIERS]
        )
        workload, profile = load_workload(config.workload, config.seed), profile_for(config)
        c0 = time.process_time()
        fleet = SimFleet(config, workload, profile)
        fleet.run()
        cpu = time.process_time() - c0
    finally:
        pool.release, pool.release_first, pool._uncache = orig_release, orig_first, orig_uncache  # type: ignore[method-assign]
        tiers.InstanceTiers.offload = orig_offload  # type: ignore[method-assign]
    runs = c["runs"] or 1
    ttft = [r.ttft_s for r in fleet.records if r.ttft_s is not None]
    row = {
        "config": config_name,
        "policy": policy,
        "seed": seed,
        **dict(c),
        "runs_per_offload": c["runs"] / max(c["offloads"], 1),
        "share_under_16_blocks": sizes[0] / runs,
        "share_adjacent": c["adjacent"] / runs,
        "share_mergeable": c["mergeable"] / runs,
        "run_sizes_by_16_blocks": {str(k): sizes[k] for k in sorted(sizes)},
    }
    return row, cpu, float(np.percentile(ttft, 90))


def merged_log(log: list[Any], joins: list[bool]) -> list[Any]:
    """The eviction log with each entry that `joins` the one before it (module docstring)
    handed down as one run with it."""
    out: list[Any] = []
    for (lo, hs, below), join in zip(log, joins, strict=True):
        if join:
            hs.extend(out[-1][1])  # this piece's list is the pool's no more (handed down)
            out[-1] = (lo, hs, below)
        else:
            out.append((lo, hs, below))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/tiers_offload_runs.json"))
    ap.add_argument("--configs", default="agentic_long")
    ap.add_argument("--policies", default="round_robin,sglang_cache_aware,dynamo_kv,predicted_ttft")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--merge", action="store_true", help="time the merge trial (docstring)")
    ap.add_argument("--repeats", type=int, default=3, help="--merge: timed runs of each")
    args = ap.parse_args()
    rows = []
    for name in args.configs.split(","):
        for policy in args.policies.split(","):
            for seed in [int(s) for s in args.seeds.split(",")]:
                row, cpu, p90 = count_run(name, policy, seed)
                if args.merge:
                    cpus: dict[bool, list[float]] = {False: [cpu], True: []}
                    p90s = {False: p90}
                    for k in range(2 * args.repeats - 1):  # merged, plain, merged, ...
                        m = k % 2 == 0
                        _r, c, p = count_run(name, policy, seed, m)
                        cpus[m].append(c)
                        p90s[m] = p
                    row["merge_trial"] = {
                        "cpu_s": min(cpus[False]),
                        "cpu_s_merged": min(cpus[True]),
                        "ttft_p90_s": p90s[False],
                        "ttft_p90_s_merged": p90s[True],
                    }
                    t = row["merge_trial"]
                    print(
                        f"  merge trial: CPU {t['cpu_s']:.3f} -> {t['cpu_s_merged']:.3f} s, "
                        f"TTFT p90 {t['ttft_p90_s']:.2f} -> {t['ttft_p90_s_merged']:.2f} s"
                    )
                rows.append(row)
                print(
                    f"{name} {policy:19s} seed {seed}: {row['offloads']:6d} offloads, "
                    f"{row['runs']:6d} runs ({row['runs_per_offload']:.2f} each, "
                    f"{100 * row['share_under_16_blocks']:.0f}% under 16 blocks); chain-adjacent "
                    f"to the one before {100 * row['share_adjacent']:.0f}%, of one release "
                    f"{100 * row['share_mergeable']:.0f}%: {row['runs_if_merged']} runs if merged"
                )
    atomic_write_json(args.out, {**stamp("tiers_offload_runs"), "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
