"""An engine-side variant on real vLLM CPU engines, beside the simulator's prediction:
finished sessions first (`--compare finish_first`, docs/kv_tiers/pause_aware.md, "On real
vLLM engines") or a waiting request's prefix refreshed on arrival (`--compare
refresh_on_arrival`, docs/kv_tiers/study_followups.md, "Refreshing a waiting request's prefix
on real engines"); each pre-registered before any run.

The real tiers study's base (config/runs/real_cpu_tiers.yaml: two tiny-model CPU instances of
4,128 KV tokens each, 24 token-scaled agentic sessions, closed loop, HBM only) per router and
workload seed, with the variant off and on. finish_first: the proxy asks for the release on
each session's last turn (`--finish-first`) and the engines' release-first plugin does it
(serve/vllm_release_first.py). refresh_on_arrival: the engines run the refresh plugin
(serve/vllm_refresh_on_arrival.py, set by `sim.refresh_on_arrival`). The two variants of a seed
run back to back, in alternating order, on fleets kept between runs (`shared_fleets`: prefix
caches reset between runs; the refresh variants need engines launched apart, so both fleets are
kept), and the machine's load is recorded per run. The same configs run on the simulator
(`backend=sim`). Paired per router over seeds (agentic_kvc.paired.paired_compare: 95% two-level
bootstrap): HBM hit rate, TTFT p50 / p90, E2E p90.

`--replicates N` runs each seed's pair N times (the variants' order alternating from one
replicate to the next) and pairs on (seed, replicate): on a shared 2-core machine one real run's
TTFT p90 (the 5th slowest of ~45 requests) moves with the machine's state as much as with the
variant, so a pair of single runs per seed under-states what a rerun would show
(docs/kv_tiers/pause_aware.md, "Where the real tail loss comes from"). The simulator is
deterministic: its replicates would be copies, so it runs once per seed whatever N.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/engine_variant_real.py \\
        --compare refresh_on_arrival --out results/bench/refresh_on_arrival_real.json

(benchmarks/finish_first_real.py is this script with `--compare finish_first`, the command the
archived finish_first_real files name.)
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
# Per comparison: the variants, baseline first, and the override that makes each.
COMPARISONS = {
    "finish_first": {"lru": "sim.finish_first=false", "finish_first": "sim.finish_first=true"},
    "refresh_on_arrival": {
        "plain": "sim.refresh_on_arrival=false",
        "refresh": "sim.refresh_on_arrival=true",
    },
}


# The engine plugin each comparison rests on (its variable), whose start-up line
# (serve/vllm_internals.announce) a real run's engine logs show where it is patched in: the
# release-first plugin on every engine (the launcher sets it; the proxy asks for a release only
# in the finish_first variant), the refresh plugin on the refresh variant's engines only.
PLUGIN_ENV = {"finish_first": "AKVC_RELEASE_FIRST", "refresh_on_arrival": "AKVC_REFRESH_ON_ARRIVAL"}


def engines_announcing(run_dir: Path, backend_info: dict[str, Any], env: str) -> int:
    """How many of the run's engine logs (in the run that started a shared fleet, if another
    did) say the plugin behind `env` was patched in."""
    logs = Path(backend_info.get("fleet_shared_from") or run_dir) / "logs"
    line = f"agentic_kvc: {env}=1:"
    return sum(line in f.read_text(errors="replace") for f in logs.glob("vllm-*.log"))


def run_all(
    backend: str,
    policies: list[str],
    seeds: list[int],
    results: Path,
    extra: list[str],
    replicates: int = 1,
    compare: str = "finish_first",
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    variants = COMPARISONS[compare]
    baseline, candidate = variants
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    reps = 1 if backend == "sim" else replicates
    with shared_fleets(keep=len(variants)):
        for policy in policies:
            frames = []
            for seed, rep in ((s, r) for s in seeds for r in range(reps)):
                order = list(variants) if (seed + rep) % 2 == 0 else list(variants)[::-1]
                for variant in order:
                    sets = [f"backend={backend}", f"seed={seed}", f"policy.name={policy}"]
                    config = load_config(BASE, [*sets, *extra, variants[variant]])
                    t0 = time.monotonic()
                    # A replicate is the same config, so the same run id: its own folder, or
                    # `execute` would hand back the first replicate's complete run.
                    run_dir = execute(config, results / f"replicate{rep}" if reps > 1 else results)
                    rows = list(read_jsonl(run_dir / "requests.jsonl"))
                    manifest = json.loads((run_dir / "manifest.json").read_text())
                    info_b = manifest.get("backend_info", {})
                    load = info_b.get("host_load", {})
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
                    if backend == "vllm":
                        info["engines_with_plugin"] = engines_announcing(
                            run_dir, info_b, PLUGIN_ENV[compare]
                        )
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
                    frame, baseline, candidate, metric, pair_on=("seed", "replicate")
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


def main(script: str = "benchmarks/engine_variant_real.py", compare: str | None = None) -> int:
    """The command line; `compare` fixed (a wrapper script's) leaves `--compare` out of it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    if compare is None:
        ap.add_argument(
            "--compare",
            choices=sorted(COMPARISONS),
            required=True,
            help="the engine-side variant: off (baseline) against on",
        )
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
        default=None,
        help="the file's `benchmark` field (default: <compare>_real; finish_first_real_seeds: "
        "the confirmatory seeds)",
    )
    ap.add_argument(
        "--set", action="append", default=[], help="a config override for every run (repeat)"
    )
    args = ap.parse_args()
    if args.replicates < 1:
        ap.error(f"--replicates must be >= 1, got {args.replicates}")
    fixed = compare is not None  # a wrapper's command names no --compare
    compare = compare or args.compare
    name = args.name or f"{compare}_real"
    results = args.results or Path(tempfile.mkdtemp(prefix=f"akvc_{name}_"))
    policies = args.policies.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": name,
        "machine": hardware_info(),
        "base": BASE,
        "parameters": {
            "policies": policies,
            "seeds": seeds,
            "replicates": args.replicates,
            "variants": COMPARISONS[compare],
        },
        "command": f"{script} "
        + ("" if fixed else f"--compare {compare} ")
        + " ".join(
            f"--{k} {v}"
            for k, v in (("policies", args.policies), ("seeds", args.seeds), ("name", name))
        )
        + (f" --replicates {args.replicates}" if args.replicates > 1 else "")
        + "".join(f" --set {s}" for s in args.set),
        "paired": "agentic_kvc.paired.paired_compare, 95% two-level bootstrap over (seed, "
        "replicate) pairs",
        "runs": [],
        "comparisons": [],
    }
    for backend in args.backends.split(","):
        runs, comparisons = run_all(
            backend, policies, seeds, results, args.set, args.replicates, compare
        )
        out["runs"] += runs
        out["comparisons"] += comparisons
        out["wall_s"] = round(time.monotonic() - t0, 1)
        atomic_write_json(args.out, out)  # what is done is kept if a later backend fails
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
