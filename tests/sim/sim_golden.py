"""Golden record hashes: the simulator's output, byte for byte, on every shipped run config.

Every config under config/runs/ (the real one with backend=sim), every registered policy (plus
the parameter variants the experiments use), seeds 0-2, and a few variants that reach the code
paths the base configs do not (exact cache view, fresh scrapes, open loop, session cap, a small
KV cache that preempts and evicts, long prompts, a wide fleet), and KV tiers below HBM (issue
29: host, disk per node and fleet-wide, retention, write-through, the exact view; the
tier-aware routers). Session counts are cut where a run would take long. For each case: sha256
of requests.jsonl and instances.jsonl as `akvc run` writes them.

The fixture (golden_hashes.json) was written by the simulator before its speed-ups (issue 16);
`test_sim_golden.py` checks that the current code still writes the same bytes. A deliberate
change of the simulator's behaviour (or of a profile) regenerates it:

    .venv/bin/python tests/sim/sim_golden.py --write            # all cases, a few minutes
    .venv/bin/python tests/sim/sim_golden.py --write --only SUBSTR  # add/replace these cases
    .venv/bin/python tests/sim/sim_golden.py --check [--only SUBSTR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from agentic_kvc.config import load_config
from agentic_kvc.io import dumps_canonical
from agentic_kvc.sim.run_backend import run_sim

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("golden_hashes.json")
RUNS = REPO / "config" / "runs"

# Registered policies (the registry's own list at the time of writing, so a new policy does not
# silently change the case set) and the parameter variants the experiments run.
POLICIES: dict[str, list[str]] = {
    "round_robin": [],
    "least_loaded": [],
    "consistent_hash": [],
    "sglang_cache_aware": [],
    "llmd_weighted": [],
    "dynamo_kv": [],
    "dynamo_lmetric": [],
    "lmetric": [],
    "unified": [],
    "additive": [],
    "adaptive": [],
    "adaptive_v2": ["policy.name=adaptive", "policy.params.version=2"],
    "elastic": [],
    "elastic_cost": ["policy.name=elastic", "policy.params.mode=cost"],
    "static_pd": [],
    "conditional_disagg": [],
}
BASES: dict[str, tuple[str, list[str]]] = {
    "sim_agentic": ("sim_agentic.yaml", []),
    "sim_h20_agentic": ("sim_h20_agentic.yaml", []),
    "real_cpu_small": ("real_cpu_small.yaml", ["backend=sim"]),
}
SEEDS = (0, 1, 2)
# Variants on seed 0 for paths the bases miss: name -> (base, sets, policies).
VARIANTS: dict[str, tuple[str, list[str], list[str]]] = {
    "exact_view": (
        "sim_h20_agentic",
        ["policy.cache_view=exact"],
        ["unified", "lmetric", "dynamo_kv", "adaptive_v2", "static_pd"],
    ),
    "fresh_scrapes": ("sim_h20_agentic", ["sim.scrape_interval_s=0"], ["unified", "least_loaded"]),
    "open_loop": ("sim_agentic", ["workload.mode=open"], ["round_robin", "unified"]),
    "session_cap": (
        "sim_h20_agentic",
        ["replay.max_inflight_sessions=20"],
        ["lmetric", "adaptive_v2"],
    ),
    # ~6 prompts' worth of KV per instance: preemptions, evictions, duplicate blocks.
    "small_kv": (
        "sim_agentic",
        ["fleet.kv_cache_tokens=8192", "workload.generator.sessions=40"],
        ["round_robin", "unified", "adaptive_v2", "static_pd"],
    ),
    # Two instances under a burst of sessions with little KV: preemptions and recomputes.
    "pressure": (
        "sim_agentic",
        [
            "fleet.instances=2",
            "fleet.kv_cache_tokens=12288",
            "workload.generator.sessions=100",
            "workload.generator.params.session_rate_per_s=20",
        ],
        ["round_robin", "unified", "adaptive_v2", "static_pd", "lmetric"],
    ),
    "long_context": (
        "sim_h20_agentic",
        [
            "workload.generator.sessions=60",
            "workload.generator.params.first_turn_median_tokens=48000",
        ],
        ["round_robin", "unified", "adaptive_v2"],
    ),
    "wide_fleet": (
        "sim_h20_agentic",
        ["fleet.instances=64", "workload.generator.sessions=300"],
        ["round_robin", "unified", "lmetric"],
    ),
}
# KV tiers (issue 29), seed 0: the long-context preset cut to 40 sessions on a small HBM (100k
# tokens per instance), so that blocks move down to host and disk and come back within a
# fraction of a second per case. name -> (sets, policies); policies outside POLICIES run with
# their defaults. The first policy of each is the quick test's case.
TIERED_BASE = (
    "sim_h20_agentic_long.yaml",
    ["workload.generator.sessions=40", "fleet.kv_cache_tokens=100000"],
)
_HOST_DISK = ["fleet.kv_tiers.host_gib=4", "fleet.kv_tiers.disk_gib=50"]
TIERED: dict[str, tuple[list[str], list[str]]] = {
    "tiers_host": (
        ["fleet.kv_tiers.host_gib=128"],
        ["dynamo_kv", "round_robin", "sglang_cache_aware", "predicted_ttft", "llmd_precise"],
    ),
    "tiers_disk": (_HOST_DISK, ["llmd_precise", "predicted_ttft", "dynamo_kv"]),
    "tiers_fleet_disk": (
        [
            "fleet.kv_tiers.host_gib=4",
            "fleet.kv_tiers.disk_gib=100",
            "fleet.kv_tiers.disk_scope=fleet",
        ],
        ["predicted_ttft", "dynamo_kv"],
    ),
    "tiers_retention": (
        [*_HOST_DISK, "fleet.kv_tiers.eviction=retention", "sim.kv_retention_ttl_s=30"],
        ["predicted_ttft", "dynamo_kv"],
    ),
    "tiers_exact_write_through": (
        [
            "fleet.kv_tiers.host_gib=16",
            "fleet.kv_tiers.write_through=true",
            "policy.cache_view=exact",
        ],
        ["predicted_ttft", "dynamo_kv", "llmd_precise"],
    ),
}


def cases() -> dict[str, tuple[Path, list[str]]]:
    """Case name -> (base config, --set overrides)."""
    out: dict[str, tuple[Path, list[str]]] = {}
    for base, (path, base_sets) in BASES.items():
        for policy, psets in POLICIES.items():
            sets = psets or [f"policy.name={policy}"]
            for seed in SEEDS:
                out[f"{base}/{policy}/seed{seed}"] = (
                    RUNS / path,
                    [*base_sets, *sets, f"seed={seed}"],
                )
    for variant, (base, vsets, policies) in VARIANTS.items():
        path, base_sets = BASES[base]
        for policy in policies:
            sets = POLICIES[policy] or [f"policy.name={policy}"]
            out[f"{variant}/{policy}/seed0"] = (RUNS / path, [*base_sets, *sets, *vsets, "seed=0"])
    path, base_sets = TIERED_BASE
    for variant, (vsets, policies) in TIERED.items():
        for policy in policies:
            sets = POLICIES.get(policy) or [f"policy.name={policy}"]
            out[f"{variant}/{policy}/seed0"] = (RUNS / path, [*base_sets, *sets, *vsets, "seed=0"])
    return out


def digest(rows: list[dict]) -> str:
    """sha256 of the JSONL file `runs.write_results` writes for these rows."""
    h = hashlib.sha256()
    for r in rows:
        h.update((dumps_canonical(r) + "\n").encode())
    return h.hexdigest()


def run_case(base: Path, sets: list[str]) -> dict[str, str]:
    config = load_config(base, sets)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_sim(config, Path(tmp))
    return {"requests": digest(result.records), "instances": digest(result.samples)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"(re)write {FIXTURE.name}")
    mode.add_argument("--check", action="store_true", help="compare with the fixture")
    ap.add_argument("--only", default="", help="cases whose name contains this")
    args = ap.parse_args()
    # --write --only: the other cases' digests kept as they are in the fixture.
    keep = args.check or (args.write and args.only)
    expected = json.loads(FIXTURE.read_text())["cases"] if keep else {}
    got: dict[str, dict[str, str]] = {}
    bad = 0
    t_all = time.perf_counter()
    for name, (base, sets) in cases().items():
        if args.only not in name:
            continue
        t0 = time.perf_counter()
        got[name] = run_case(base, sets)
        ok = "" if not args.check else ("ok" if got[name] == expected.get(name) else "DIFFERS")
        bad += ok == "DIFFERS"
        print(f"{name:45s} {time.perf_counter() - t0:6.2f} s {ok}", file=sys.stderr)
    print(f"{len(got)} cases in {time.perf_counter() - t_all:.1f} s", file=sys.stderr)
    if args.write:
        merged = {**expected, **got}
        FIXTURE.write_text(json.dumps({"cases": merged}, indent=1, sort_keys=True) + "\n")
    elif bad:
        print(f"{bad} cases differ from {FIXTURE.name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
