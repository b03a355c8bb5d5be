"""Finished sessions first on real vLLM CPU engines, beside the simulator's prediction
(docs/kv_tiers/pause_aware.md, "On real vLLM engines": pre-registered before any run).

The real tiers study's base (config/runs/real_cpu_tiers.yaml: two tiny-model CPU instances of
4,128 KV tokens each, 24 token-scaled agentic sessions, closed loop, HBM only) per router and
workload seed, with `sim.finish_first` off and on: on real engines the proxy asks for the
release on each session's last turn (`--finish-first`) and the engines' release-first plugin
does it (serve/vllm_release_first.py). The two variants of a seed run back to back, in
alternating order, on one shared fleet (`shared_fleets`: prefix caches reset between runs),
and the machine's load is recorded per run. The same configs run on the simulator
(`backend=sim`). Paired per router over seeds (agentic_kvc.paired.paired_compare: 95% two-level
bootstrap): HBM hit rate, TTFT p50 / p90, E2E p90.

`--replicates N` runs each seed's pair N times (the variants' order alternating from one
replicate to the next) and pairs on (seed, replicate): on a shared 2-core machine one real run's
TTFT p90 (the 5th slowest of ~45 requests) moves with the machine's state as much as with the
variant, so a pair of single runs per seed under-states what a rerun would show
(docs/kv_tiers/pause_aware.md, "Where the real tail loss comes from"). The simulator is
deterministic: its replicates would be copies, so it runs once per seed whatever N.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/finish_first_real.py \\
        --out results/bench/finish_first_real.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.paired import paired_compare, request_frame
from agentic_kvc.runs import execute, hardware_info
from agentic_kvc.serve.run_backend import shared_fleets

BASE = "config/runs/real_cpu_tiers.yaml"
METRICS = ("hit_rate", "ttft_p50", "ttft_p90", "e2e_p90")
VARIANTS = {"lru": "sim.finish_first=false", "finish_first": "sim.finish_first=true"}


def run_all(
    backend: str,
    policies: list[str],
    seeds: list[int],
    results: Path,
    extra: list[str],
    replicates: int = 1,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    reps = 1 if backend == "sim" else replicates
    with shared_fleets():
        for policy in policies:
            frames = []
            for seed, rep in ((s, r) for s in seeds for r in range(reps)):
                order = list(VARIANTS) if (seed + rep) % 2 == 0 else list(VARIANTS)[::-1]
                for variant in order:
                    sets = [f"backend={backend}", f"seed={seed}", f"policy.name={policy}"]
                    config = load_config(BASE, [*sets, *extra, VARIANTS[variant]])
                    t0 = time.monotonic()
                    # A replicate is the same config, so the same run id: its own folder, or
                    # `execute` would hand back the first replicate's complete run.
                    run_dir = execute(config, results / f"replicate{rep}" if reps > 1 else results)
                    rows = list(read_jsonl(run_dir / "requests.jsonl"))
                    manifest = json.loads((run_dir / "manifest.json").read_text())
                    load = manifest.get("backend_info", {}).get("host_load", {})
                    overall = json.loads((run_dir / "summary.json").read_text())["overall"]
                    info = {
                        "backend": backend,
                        "policy": policy,
                        "seed": seed,
                        "replicate": rep,
                        "variant": variant,
                        "run_id": run_dir.name,
                        "wall_s": round(time.monotonic() - t0, 1),
                        "load1_replay": load.get("replay", {}).get("load1"),
                        "requests": overall["count"],
                        "errors": overall["errors"],
                        "hit_rate": overall["prefix_hit_rate"],
                        "ttft_p90_s": overall["ttft_s"]["p90"],
                    }
                    runs.append(info)
                    print(json.dumps(info), flush=True)
                    frames.append(
                        request_frame(rows).with_columns(
                            pl.lit(variant).alias("variant"),
                            pl.lit(seed).alias("seed"),
                            pl.lit(rep).alias("replicate"),
                            pl.lit(config.fleet.instances).alias("instances"),
                        )
                    )
            frame = pl.concat(frames)
            for metric in METRICS:
                r = paired_compare(
                    frame, "lru", "finish_first", metric, pair_on=("seed", "replicate")
                ).to_row()
                r.update(backend=backend, policy=policy)
                comparisons.append(r)
                print(
                    f"{backend} {policy} {metric}: {r['baseline_value']:.4g} -> "
                    f"{r['candidate_value']:.4g} ({100 * r['rel_diff']:+.1f}%, 95% CI "
                    f"{100 * r['ci_low']:+.1f}..{100 * r['ci_high']:+.1f}%)",
                    flush=True,
                )
    return runs, comparisons


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--policies", default="predicted_ttft,sticky_least_loaded")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--backends", default="sim,vllm", help="sim runs first: seconds")
    ap.add_argument("--results", type=Path, default=None, help="keep the run directories here")
    ap.add_argument(
        "--replicates",
        type=int,
        default=1,
        help="real runs of each seed's pair (paired on seed and replicate; the simulator once)",
    )
    ap.add_argument(
        "--name",
        default="finish_first_real",
        help="the file's `benchmark` field (finish_first_real_seeds: the confirmatory seeds)",
    )
    ap.add_argument(
        "--set", action="append", default=[], help="a config override for every run (repeat)"
    )
    args = ap.parse_args()
    if args.replicates < 1:
        ap.error(f"--replicates must be >= 1, got {args.replicates}")
    results = args.results or Path(tempfile.mkdtemp(prefix="akvc_finish_first_real_"))
    policies = args.policies.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": args.name,
        "machine": hardware_info(),
        "base": BASE,
        "parameters": {
            "policies": policies,
            "seeds": seeds,
            "replicates": args.replicates,
            "variants": VARIANTS,
        },
        "command": "benchmarks/finish_first_real.py "
        + " ".join(
            f"--{k} {v}"
            for k, v in (("policies", args.policies), ("seeds", args.seeds), ("name", args.name))
        )
        + (f" --replicates {args.replicates}" if args.replicates > 1 else "")
        + "".join(f" --set {s}" for s in args.set),
        "paired": "agentic_kvc.paired.paired_compare, 95% two-level bootstrap over (seed, "
        "replicate) pairs",
        "runs": [],
        "comparisons": [],
    }
    for backend in args.backends.split(","):
        runs, comparisons = run_all(backend, policies, seeds, results, args.set, args.replicates)
        out["runs"] += runs
        out["comparisons"] += comparisons
        out["wall_s"] = round(time.monotonic() - t0, 1)
        atomic_write_json(args.out, out)  # what is done is kept if a later backend fails
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
