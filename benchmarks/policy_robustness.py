"""Robustness sweep: our policies against every peer router on workloads no study names.

Each scenario is a base run config plus overrides (generator preset and parameters, fleet size,
hardware profile, public traces); every policy runs it with the same seeds (for traces, the same
windows), in the simulator, in this process. Per scenario the best peer is the one with the
lowest TTFT p90 (replicates pooled), and our policies (OURS: `unified`, `predicted_ttft` and
variants of it) are paired against it (`agentic_kvc.paired`, 95% two-level bootstrap) on TTFT
p90 and E2E p90; each variant is also paired against its policy's default form (`vs_default`).

Scenarios are split in two: `tune` (the two workloads the studies name, on which the policy's
design was looked at) and `held_out` (everything else: the result that counts). The policy's
coefficients come from the engine profile alone (policy/predicted_ttft.py), never a workload;
in its `cost_model=online,online_prior=generic` variant, from the streams it relays instead.

Runs are cached per (scenario, policy, seed) under --work, so the sweep can go in chunks:

    flock /tmp/akvc_cpu.lock .venv/bin/python benchmarks/policy_robustness.py \\
        --scenarios chat,heavy_tail --out results/bench/policy_robustness.json
    .venv/bin/python benchmarks/policy_robustness.py --list
    .venv/bin/python benchmarks/policy_robustness.py --analyse-only --md results/bench/robust.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.paired import paired_compare
from agentic_kvc.policy.calibrated_split import params_from_sim
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import free_dropped_fleets, profile_for
from agentic_kvc.workload import load_workload
from agentic_kvc.workload.generator import synthesize
from agentic_kvc.workload.model import Block, Request, Session, Workload

REPO = Path(__file__).resolve().parents[1]
AGENTIC = "config/runs/sim_h20_agentic.yaml"
MOONCAKE = "config/runs/sim_mooncake.yaml"
SHARED = REPO.parent / "shared" / "traces"
GEN = "workload.generator"
GP = f"{GEN}.params"

PEERS = (
    "sglang_cache_aware",
    "dynamo_kv",
    "llmd_weighted",
    "consistent_hash",
    "least_loaded",
    "conditional_disagg",
    "aibrix_prefix_cache",
    "production_stack_prefix",
)
# Our policies and variants (`name:key=value,...`). predicted_ttft's default is given the
# fleet's own profile (the simulator's physics, a near-oracle); `cost_model=online,
# online_prior=generic` fits its step cost from the streams it relays, from a generic prior,
# which is what a fleet without a profile has. The other two are its earlier versions.
OURS = (
    "unified",
    "predicted_ttft",
    "predicted_ttft:recompute_stall=false",
    "predicted_ttft:decode_term=always,recompute_stall=false",
    "predicted_ttft:cost_model=online,online_prior=generic",
)
SEEDS = (0, 1, 2, 3, 4)
# A trace without windows replays the same requests whatever the seed: one replicate.
REPLICATES = {"tracelab": 1}
METRICS = ("ttft_p90", "e2e_p90")  # what each pair compares (replicates' p90s)
WINDOWS = ([0, 300], [600, 900], [1200, 1500], [1800, 2100], [2400, 2700])

# name -> (group, base config, overrides). `tune`: the studies' own workloads.
SCENARIOS: dict[str, tuple[str, str, list[str]]] = {
    "coding": ("tune", AGENTIC, []),
    "long": ("tune", AGENTIC, [f"{GEN}.preset=agentic-long", f"{GEN}.sessions=50"]),
    "chat": ("held_out", AGENTIC, [f"{GEN}.preset=chat", f"{GP}.session_rate_per_s=2.0"]),
    "heavy_tail": ("held_out", AGENTIC, [f"{GEN}.preset=heavy-tail"]),
    "short_ctx": (
        "held_out",
        AGENTIC,
        [f"{GP}.first_turn_median_tokens=4000", f"{GP}.session_rate_per_s=1.5"],
    ),
    "low_reuse": ("held_out", AGENTIC, [f"{GP}.continue_prob=0.2", f"{GP}.session_rate_per_s=1.0"]),
    "high_reuse": ("held_out", AGENTIC, [f"{GP}.continue_prob=0.8", f"{GEN}.sessions=100"]),
    "low_load": ("held_out", AGENTIC, [f"{GP}.session_rate_per_s=0.125", f"{GEN}.sessions=80"]),
    "saturated": (
        "held_out",
        AGENTIC,
        [f"{GP}.session_rate_per_s=2.0", f"{GEN}.sessions=300"],
    ),
    "long_pauses": ("held_out", AGENTIC, [f"{GP}.tool_wait_median_s=30.0"]),
    "long_outputs": ("held_out", AGENTIC, [f"{GP}.output_median_tokens=1500"]),
    "many_turns": (
        "held_out",
        AGENTIC,
        [f"{GP}.continue_prob=0.9", f"{GP}.max_turns=12", f"{GEN}.sessions=80"],
    ),
    "fleet4": (
        "held_out",
        AGENTIC,
        ["fleet.instances=4", f"{GP}.session_rate_per_s=0.25", f"{GEN}.sessions=100"],
    ),
    "fleet16": (
        "held_out",
        AGENTIC,
        ["fleet.instances=16", f"{GP}.session_rate_per_s=1.0", f"{GEN}.sessions=400"],
    ),
    "long_fleet16": (
        "held_out",
        AGENTIC,
        [
            "fleet.instances=16",
            f"{GEN}.preset=agentic-long",
            f"{GEN}.sessions=100",
            f"{GP}.session_rate_per_s=0.2",
        ],
    ),
    "h100_qwen": ("held_out", AGENTIC, ["fleet.hardware=h100", f"{GP}.session_rate_per_s=2.0"]),
    "h100_llama8b": (
        "held_out",
        AGENTIC,
        ["fleet.hardware=h100", "fleet.model=llama-3.1-8b", f"{GP}.session_rate_per_s=1.0"],
    ),
    "mooncake": (
        "held_out",
        MOONCAKE,
        [f"workload.trace={SHARED}/mooncake_conversation_trace.jsonl"],
    ),
    "mooncake_fast": (
        "held_out",
        MOONCAKE,
        [f"workload.trace={SHARED}/mooncake_conversation_trace.jsonl", "workload.rate_scale=0.7"],
    ),
    "tracelab": (
        "held_out",
        AGENTIC,
        [
            f"workload.trace={SHARED}/tracelab_multi_session_sample.csv",
            "workload.generator=null",
            "workload.time_scale=0.05",
            "fleet.instances=2",
        ],
    ),
    # Added for issue 18's robustness check: workloads that differ in kind from the above.
    # A burst: sessions arrive at 8x the base rate for ~30 s, then the fleet drains.
    "burst": ("held_out", AGENTIC, [f"{GP}.session_rate_per_s=4.0", f"{GEN}.sessions=120"]),
    "fleet16_high": (
        "held_out",
        AGENTIC,
        ["fleet.instances=16", f"{GP}.session_rate_per_s=2.0", f"{GEN}.sessions=400"],
    ),
    # Issue 31: long-context agentic sessions, 50k-150k-token prompts (first turns median 80k,
    # contexts capped at 150k) and minute-long tool pauses (median 60 s), 8 x H20 at 0.05
    # sessions/s: an instance's KV (297k tokens) holds about two such sessions.
    "long_ctx_pauses": (
        "held_out",
        AGENTIC,
        [
            f"{GEN}.preset=agentic-long",
            f"{GEN}.sessions=40",
            f"{GP}.first_turn_median_tokens=80000",
            f"{GP}.first_turn_max_tokens=150000",
            f"{GP}.max_context_tokens=150000",
            f"{GP}.tool_wait_median_s=60.0",
            f"{GP}.session_rate_per_s=0.05",
        ],
    ),
    # `final`: frozen held-out set, run only after the policy change was frozen (never tuned on).
    "fleet2": (
        "final",
        AGENTIC,
        ["fleet.instances=2", f"{GP}.session_rate_per_s=0.125", f"{GEN}.sessions=60"],
    ),
    "subagents": (
        "final",
        AGENTIC,
        [f"{GEN}.preset=agentic-subagents", f"{GP}.session_rate_per_s=0.25", f"{GEN}.sessions=100"],
    ),
    # Heavy-tailed tool pauses (30% from a Pareto tail) with half the default KV cache:
    # sessions' prefixes are evicted during their pauses. Contexts are capped at 100k so that
    # a request fits the cache (at 100k KV and 200k contexts conditional_disagg's run grew
    # past 20 GB: the simulator does not bound a request larger than the KV cache).
    "pauses_small_kv": (
        "final",
        AGENTIC,
        [
            f"{GP}.tool_wait_tail_prob=0.3",
            f"{GP}.tool_wait_median_s=10.0",
            f"{GP}.max_context_tokens=100000",
            f"{GP}.first_turn_max_tokens=60000",
            "fleet.kv_cache_tokens=150000",
        ],
    ),
    "het_outputs": (
        "final",
        AGENTIC,
        [f"{GP}.output_median_tokens=200", f"{GP}.output_sigma=1.6"],
    ),
    "chat_llama8b": (
        "final",
        AGENTIC,
        [
            f"{GEN}.preset=chat",
            "fleet.hardware=h100",
            "fleet.model=llama-3.1-8b",
            f"{GP}.session_rate_per_s=3.0",
        ],
    ),
    # Two tenants on one fleet: coding agents (the base config) plus a chat tenant (TENANTS).
    "mixed_tenants": ("final", AGENTIC, [f"{GP}.session_rate_per_s=0.3", f"{GEN}.sessions=120"]),
}
# Scenario -> a second tenant generated beside the config's own: (preset, sessions, params).
TENANTS: dict[str, tuple[str, int, dict]] = {
    "mixed_tenants": ("chat", 300, {"session_rate_per_s": 1.0}),
}


def replicate_sets(base: str, seed_i: int) -> list[str]:
    """Seed i of a generated workload, window i of a trace (the pairs)."""
    if base == MOONCAKE:
        return [f"workload.window_s={json.dumps(WINDOWS[seed_i])}", f"seed={seed_i}"]
    return [f"seed={seed_i}"]


def policy_sets(policy: str, base: str, config_sets: list[str]) -> list[str]:
    """Policy overrides; predicted_ttft is given the fleet's own profile (what it fits)."""
    name, _, extra = policy.partition(":")
    out = [f"policy.name={name}"] + [f"policy.params.{kv}" for kv in extra.split(",") if kv]
    if name == "predicted_ttft":
        cfg = load_config(REPO / base, config_sets)
        out += [
            f"policy.params.hardware={cfg.fleet.hardware}",
            f"policy.params.model={cfg.fleet.model}",
            f"policy.params.max_num_batched_tokens={cfg.fleet.max_num_batched_tokens}",
        ]
        if "split=true" in extra:  # the pull timed by the simulator's own settings
            out += [
                f"policy.params.transfer_fixed_s={cfg.sim.kv_transfer_fixed_s}",
                f"policy.params.transfer_gbps={cfg.sim.kv_transfer_gbps}",
            ]
    if name == "calibrated_split":  # its costs from the scenario's own profile and settings
        cfg = load_config(REPO / base, config_sets)
        fit = params_from_sim(
            cfg.fleet.hardware,
            cfg.fleet.model,
            cfg.sim.kv_transfer_fixed_s,
            cfg.sim.kv_transfer_gbps,
        )
        out += [f"policy.params.{k}={v}" for k, v in fit.items() if k != "calibration_source"]
    return out


def merge_tenant(a: Workload, b: Workload) -> Workload:
    """`a` plus `b`, with b's session, request and block ids made distinct (a generator reuses
    ids across presets, which would fake prefix sharing between tenants)."""
    offset = 1 + max((bl.id for s in a.sessions for r in s.requests for bl in r.blocks), default=0)

    def req(r: Request) -> Request:
        return replace(
            r,
            request_id=f"b-{r.request_id}",
            session_id=f"b-{r.session_id}",
            blocks=tuple(Block(bl.id + offset, bl.tokens) for bl in r.blocks),
            parent_id=None if r.parent_id is None else f"b-{r.parent_id}",
            depends_on=tuple(f"b-{d}" for d in r.depends_on),
        )

    sessions = [
        Session(
            f"b-{s.session_id}",
            [req(r) for r in s.requests],
            None if s.parent_session_id is None else f"b-{s.parent_session_id}",
        )
        for s in b.sessions
    ]
    return Workload([*a.sessions, *sessions], meta={**a.meta, "tenant_b": b.meta})


def run_one(
    scenario: str,
    policy: str,
    seed_i: int,
    work: Path,
    extra_sets: Sequence[str] = (),
    label: str | None = None,
) -> pl.DataFrame:
    """One run, cached under `work`. extra_sets: overrides after the policy's own (a
    misspecified parameter, benchmarks/policy_misspec.py), with `label` naming the variant
    (its file and its `policy` column; default: the policy spec)."""
    label = label or policy
    path = work / scenario / f"{label.replace(':', '_').replace(',', '_')}_{seed_i}.parquet"
    if path.exists():  # labelled by the name asked for (a cached file may predate a rename)
        return pl.read_parquet(path).with_columns(pl.lit(label).alias("policy"))
    _, base, sets = SCENARIOS[scenario]
    rep = replicate_sets(base, seed_i)
    config = load_config(
        REPO / base, [*sets, *rep, *policy_sets(policy, base, [*sets, *rep]), *extra_sets]
    )
    workload = load_workload(config.workload, config.seed)
    if scenario in TENANTS:
        preset, n, params = TENANTS[scenario]
        workload = merge_tenant(workload, synthesize(preset, n, config.seed, params))
    fleet = SimFleet(config, workload, profile_for(config))
    fleet.run()
    rows = [r.to_dict() for r in fleet.records]
    del fleet
    free_dropped_fleets()  # else a sweep's process grows by every run's stores
    df = pl.DataFrame(
        {
            "request_id": [r["request_id"] for r in rows],
            "ttft_s": [r["ttft_s"] for r in rows],
            "tpot_s": [r["tpot_s"] for r in rows],
            "e2e_s": [r["e2e_s"] for r in rows],
            "error": [r["error"] or "" for r in rows],
            "input_tokens": [r["input_tokens"] for r in rows],
            "cached_tokens": [r["cached_tokens"] for r in rows],
            "prefill_instance": [r["prefill_instance"] for r in rows],
            "reason": [r["reason"] for r in rows],
        },
        schema_overrides={"ttft_s": pl.Float64, "tpot_s": pl.Float64, "e2e_s": pl.Float64},
    ).with_columns(
        pl.lit(label).alias("policy"),
        pl.lit(seed_i).alias("seed"),
        pl.lit(config.fleet.instances).alias("instances"),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    df.write_parquet(path)
    return df


def p90(df: pl.DataFrame, col: str) -> float:
    ok = df.filter(pl.col("error") == "")
    return float(ok[col].quantile(0.9, "linear"))


def analyse(scenario: str, df: pl.DataFrame, ours: list[str]) -> dict:
    peers = [p for p in PEERS if p in set(df["policy"])]
    ttft = {p: p90(df.filter(pl.col("policy") == p), "ttft_s") for p in df["policy"].unique()}
    best = min(peers, key=lambda p: ttft[p])
    out: dict = {
        "scenario": scenario,
        "group": SCENARIOS[scenario][0],
        "best_peer": best,
        "ttft_p90": ttft,
        "errors": {
            p: int(df.filter((pl.col("policy") == p) & (pl.col("error") != "")).height)
            for p in ttft
        },
    }
    for o in ours:
        if o not in ttft:
            continue
        out[o] = {m: paired_compare(df, best, o, m, by="policy").to_row() for m in METRICS}
    # A variant (`name:k=v,...`) against its policy's default form, when both ran: what the
    # variant's change alone does (e.g. the cost model fitted online instead of the profile's).
    variants = {o: o.partition(":")[0] for o in ours if ":" in o}
    vs_default = {
        o: {m: paired_compare(df, base, o, m, by="policy").to_row() for m in METRICS}
        for o, base in variants.items()
        if o in ttft and base in ttft
    }
    if vs_default:
        out["vs_default"] = vs_default
    return out


def goal_check(results: list[dict], ours: list[str]) -> dict:
    """Issue 18's goal per policy of ours: the scenarios where it is significantly worse than
    the best peer (TTFT p90 or E2E p90: interval above 0), and its largest significant TTFT p90
    lead among scenarios where its E2E p90 is not significantly worse."""
    out = {}
    for o in ours:
        rows = [r for r in results if o in r]
        worse = [
            r["scenario"]
            for r in rows
            if any(r[o][m]["ci_low"] > 0 for m in ("ttft_p90", "e2e_p90"))
        ]
        leads = [
            (r[o]["ttft_p90"]["rel_diff"], r["scenario"])
            for r in rows
            if r[o]["ttft_p90"]["ci_high"] < 0 and r[o]["e2e_p90"]["ci_low"] <= 0
        ]
        best = min(leads) if leads else None
        out[o] = {
            "scenarios": len(rows),
            "significantly_worse": worse,
            "best_lead": None if best is None else {"scenario": best[1], "ttft_p90": best[0]},
        }
    return out


def cell(r: dict) -> str:
    s = f"{100 * r['rel_diff']:+.1f}% [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]"
    return s + ("" if r["significant"] else " n.s.")


def markdown(results: list[dict], ours: list[str]) -> str:
    head = ["scenario", "group", "best peer", "peer TTFT p90 (s)"]
    for o in ours:
        head += [f"{o} TTFT p90 vs peer", f"{o} E2E p90 vs peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        row = [r["scenario"], r["group"], r["best_peer"], f"{r['ttft_p90'][r['best_peer']]:.2f}"]
        for o in ours:
            row += [cell(r[o]["ttft_p90"]), cell(r[o]["e2e_p90"])] if o in r else ["-", "-"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--scenarios", default="all", help="comma list, 'all', 'tune', 'held_out', 'final'"
    )
    ap.add_argument(
        "--ours",
        default=None,
        help="our policies, comma list; 'name:key=value;...' sets parameters (default: OURS)",
    )
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="replicates per policy")
    ap.add_argument("--work", type=Path, default=REPO / "results" / "robustness")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every scenario's results")
    ap.add_argument("--md", type=Path, default=None, help="the markdown table")
    ap.add_argument("--analyse-only", action="store_true", help="only scenarios already run")
    ap.add_argument("--list", action="store_true", help="list scenarios and exit")
    a = ap.parse_args()
    if a.list:
        for k, (g, b, s) in SCENARIOS.items():
            print(f"{k:14s} {g:9s} {b} {' '.join(s)}")
        return 0
    if a.scenarios in ("all", "tune", "held_out", "final"):
        names = [k for k, v in SCENARIOS.items() if a.scenarios in ("all", v[0])]
    else:
        names = a.scenarios.split(",")
    ours = list(OURS) if a.ours is None else [o.replace(";", ",") for o in a.ours.split(",")]
    results = []
    for sc in names:
        if a.analyse_only and not (a.work / sc).exists():
            continue
        t0 = time.perf_counter()
        frames = [
            run_one(sc, p, s, a.work)
            for p in [*PEERS, *ours]
            for s in range(REPLICATES.get(sc, a.seeds))
            if not a.analyse_only or (a.work / sc).exists()
        ]
        df = pl.concat(frames, how="vertical_relaxed")
        res = analyse(sc, df, ours)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        print(markdown([res], ours).splitlines()[-1], f"({res['wall_s']} s)", flush=True)
    order = {"tune": 0, "held_out": 1, "final": 2}
    results.sort(key=lambda r: order[r["group"]])
    md = markdown(results, ours)
    print(md)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "benchmark": "policy_robustness",
            "seeds": a.seeds,
            "peers": list(PEERS),
            "ours": ours,
            "goal": goal_check(results, ours),
            "scenarios": results,
        }
        a.out.write_text(json.dumps(doc, indent=1))
    write_md(a.md, md)
    return 0


def write_md(path: Path | None, md: str) -> None:
    """The markdown table, when asked for (--md)."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(md)


if __name__ == "__main__":
    sys.exit(main())
