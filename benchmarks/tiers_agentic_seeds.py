"""The tiers study's agentic-long cells with more seeds, and two held-out agentic workloads.

docs/kv_tiers/study_followups.md, "The agentic-long cells over 11 seeds, and two held-out agentic
workloads".
Issue 29's goal 1 (a realistic host tier cuts the best HBM-only peer's TTFT p90 on the
long-context agentic workload by >= 40%) and goal 2 (predicted_ttft never significantly worse
than the best peer with tiers, >= 15% better somewhere, E2E p90 not worse) are judged in
REPORT.md over the study's generator seeds (3 until 2026-11-28 23:10 UTC, 5 since), whose
intervals are wide. This runs, through `akvc run-batch` into a scratch results folder, and
analyses with the study's own code (`run_study("tiers", ...)` on a plan of just these
experiments, so the paired intervals are the study's):

- `--part seeds`: the five `tiers_agentic_*` experiments of config/config.yaml as configured,
  except seeds 0..N-1 (default 11) instead of those configured. The configured seeds run
  first, then the extra ones, each in its own `akvc run-batch` process whose CPU seconds are
  recorded (what the extra seeds would add to `make report`).
- `--part heldout`: workloads no issue names, set before any of these runs: agentic-long as
  `tiers_agentic_hi` on 8 x H20 with 120 sessions at 0.2 sessions/s (the same load per
  instance, twice the fleet), and agentic-long with no Pareto tail (`tool_wait_tail_prob: 0`)
  at 0.1 sessions/s; five routers, host 0 and 128 GiB, seeds 0-4.
- `--part subagents`: `tiers_agentic_hi` with 30% of turns spawning 1-4 subagents (the
  agentic-subagents preset's share); five routers, host 0 and 128 GiB, seeds 0-4.
- `--part deployments`: two deployments no issue names, set before any of their runs
  (docs/kv_tiers/study_followups.md, "Two deployments no issue names"): `tiers_agentic_hi`'s
  workload on 4 x H100 and on 4 x H20 serving Llama-3.1-8B (dense; 128 KiB of KV per token),
  sessions ending at the model's 128k context less the output cap, at 0.1 and 0.2 sessions/s
  and at the study's KV pressure (rate and sessions scaled by the KV tokens an instance holds
  against the study's testbed: `kv_ratio`); five routers, host 0 and 128 GiB, seeds 0-10.

    nice -n 10 .venv/bin/python benchmarks/tiers_agentic_seeds.py --part seeds \\
        --results /tmp/akvc_k4_seeds --out /tmp/akvc_k4_seeds/summary.json
    nice -n 10 .venv/bin/python benchmarks/tiers_agentic_seeds.py --part heldout \\
        --results /tmp/akvc_k4_heldout --out /tmp/akvc_k4_heldout/summary.json
    nice -n 10 .venv/bin/python benchmarks/tiers_agentic_seeds.py --part deployments \\
        --results /tmp/akvc_deploy --out /tmp/akvc_deploy/summary.json

The study's section (section.md, findings.json) lands in RESULTS/tables_<N>seeds; the JSON
summary keeps the answer, the rows of the best HBM-only peer, of each setup's best peer and of
predicted_ttft, the best-with-tier against best-HBM-only comparison with per-seed p90s, and
the CPU seconds. `--analyse-only --seeds N` re-analyses seeds 0..N-1 of runs already made (the
docs' 3- and 5-seed columns: `--out RESULTS/summary_3seeds.json`); `--table SUMMARY...` prints
the docs' tables (goal-1 columns per summary, goal 2 from the last). Runs already in the
results folder are skipped by run-batch (the run id is the config's hash); the simulator is
deterministic, so a rerun gives the same numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from agentic_kvc.analysis.experiments import Plan, expand
from agentic_kvc.analysis.studies import run_study, tiers
from agentic_kvc.analysis.studies.base import compare, diff_cell, load_study
from agentic_kvc.paired import PairedResult

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from tiers_sweep import stamp  # noqa: E402
from tiers_tracelab_gap import as_json  # noqa: E402

AGENTIC = (
    "tiers_agentic_lo",
    "tiers_agentic_lo_ceiling",
    "tiers_agentic_hi",
    "tiers_agentic_hi_ceiling",
    "tiers_agentic_hi_disk",
)


def _experiments() -> dict[str, dict[str, Any]]:
    exps = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    return {e["name"]: e for e in exps}


def with_seeds(exp: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    out = copy.deepcopy(exp)
    out["matrix"]["seed"] = seeds
    return out


def seeds_part(n: int) -> tuple[list[dict[str, Any]], list[int]]:
    """The agentic-long experiments with seeds 0..n-1, and the seeds they are configured with."""
    exps = _experiments()
    configured = sorted({s for name in AGENTIC for s in exps[name]["matrix"]["seed"]})
    return [with_seeds(exps[name], list(range(n))) for name in AGENTIC], configured


def derived(
    base: dict[str, Any], name: str, variant: str, sets: dict[str, Any], n: int
) -> dict[str, Any]:
    """`base` (an experiment of config/config.yaml) renamed, with `sets` on top of its fixed
    settings, crossing the study's five routers, HBM only and a 128 GiB host tier, seeds
    0..n-1."""
    exp = copy.deepcopy(base)
    exp["name"], exp["variant"] = name, variant
    exp["set"].update(sets)
    exp["matrix"] = {
        "policy.name": list(tiers.ROUTERS),
        "fleet.kv_tiers.host_gib": [0, 128],
        "seed": list(range(n)),
    }
    return exp


def heldout_part(n: int) -> list[dict[str, Any]]:
    """Two workloads derived from `tiers_agentic_hi` (see the module docstring)."""
    hi = _experiments()["tiers_agentic_hi"]
    out = []
    for name, variant, sets in (
        (
            "heldout_agentic_8x",
            "held out: agentic-long on 8 x H20, heavy-tailed pauses, 0.2 sessions/s",
            {
                "fleet.instances": 8,
                "workload.generator.sessions": 120,
                "workload.generator.params.session_rate_per_s": 0.2,
            },
        ),
        (
            "heldout_agentic_notail",
            "held out: agentic-long, no Pareto tail, 0.1 sessions/s",
            {"workload.generator.params.tool_wait_tail_prob": 0.0},
        ),
    ):
        out.append(derived(hi, name, variant, sets, n))
    return out


def subagents_part(n: int) -> list[dict[str, Any]]:
    """`tiers_agentic_hi` with sessions that spawn subagents (docs/kv_tiers/study_followups.md,
    "Agentic sessions that spawn subagents"): the agentic-subagents preset's share of turns
    that spawn them, the rest of the workload unchanged."""
    hi = _experiments()["tiers_agentic_hi"]
    variant = "held out: agentic-long with subagents (30% of turns spawn 1-4), 0.1 sessions/s"
    sets = {"workload.generator.params.subagent_prob": 0.3}
    return [derived(hi, "heldout_agentic_subagents", variant, sets, n)]


# Llama-3.1-8B's context (131,072 tokens) less the generator's output cap (`output_max_tokens`,
# 8,192): a session whose next prompt would not fit ends, as an agent's context fills.
LLAMA_CONTEXT_PROMPT_TOKENS = 131_072 - 8_192
DEPLOYMENTS = (("h100", "4 x H100"), ("h20", "4 x H20"))
DEPLOYMENT_RATES = (0.1, 0.2)  # the study's rate, and twice it


def kv_ratio(hardware: str) -> float:
    """Llama-3.1-8B's KV tokens per instance on `hardware` over the study's testbed's
    (Qwen3-Coder-30B-A3B on H20): how much more of the sessions' context one instance holds."""
    from agentic_kvc.profiles import get_profile

    ours = get_profile(hardware, "llama-3.1-8b").kv_capacity_tokens
    return ours / get_profile("h20", "qwen3-coder-30b-a3b").kv_capacity_tokens


def deployments_part(n: int) -> list[dict[str, Any]]:
    """`tiers_agentic_hi`'s workload on two deployments (see the module docstring): at
    `DEPLOYMENT_RATES`, and at the study's KV pressure (rate and sessions x `kv_ratio`)."""
    hi = _experiments()["tiers_agentic_hi"]
    sessions = int(hi["set"]["workload.generator.sessions"])
    study_rate = float(hi["set"]["workload.generator.params.session_rate_per_s"])
    out = []
    for hardware, fleet in DEPLOYMENTS:
        r = kv_ratio(hardware)
        rate, count = round(study_rate * r, 3), round(sessions * r)
        loads = [(f"{x}", {"session_rate_per_s": x}, f"{x} sessions/s") for x in DEPLOYMENT_RATES]
        loads.append(
            (
                "kvpressure",
                {"session_rate_per_s": rate, "sessions": count},
                f"the study's KV pressure ({rate} sessions/s, {count} sessions)",
            )
        )
        for tag, load, words in loads:
            sets = {
                "fleet.hardware": hardware,
                "fleet.model": "llama-3.1-8b",
                "workload.generator.params.max_context_tokens": LLAMA_CONTEXT_PROMPT_TOKENS,
                "workload.generator.params.session_rate_per_s": load["session_rate_per_s"],
            }
            if "sessions" in load:
                sets["workload.generator.sessions"] = load["sessions"]
            variant = (
                f"held out: Llama-3.1-8B on {fleet}, agentic-long (128k context), "
                f"heavy-tailed pauses, {words}"
            )
            out.append(derived(hi, f"deploy_{hardware}_llama8b_{tag}", variant, sets, n))
    return out


def run_batch(plan: Plan, results: Path, seeds: set[int] | None) -> dict[str, float]:
    """Run the plan's runs (those of `seeds` only, when given) in one `akvc run-batch`
    process; its wall and CPU seconds (user + system of the child)."""
    specs = [
        json.dumps([r.base, *r.overrides]) for r in plan.runs if seeds is None or r.seed in seeds
    ]
    specs = list(dict.fromkeys(specs))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [str(REPO / ".venv/bin/akvc"), "run-batch", "--results", str(results), *specs],
        check=True,
        cwd=REPO,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "runs": len(specs),
        "wall_s": time.perf_counter() - t0,
        "cpu_s": cpu,
        "loadavg_after": os.getloadavg()[0],
    }


def paired(r: PairedResult | None) -> dict[str, Any] | None:
    """A comparison in the tiers benchmarks' form (`tiers_tracelab_gap.as_json`), None kept."""
    return None if r is None else as_json(r)


def summary(rows: list[tiers.Row]) -> list[dict[str, Any]]:
    """Per cell: the best HBM-only peer's rows (its gain from each host setup), each setup's
    best peer's and predicted_ttft's rows (ours against that peer), as the study's table
    prints them (`tiers.Row.cells`), and those comparisons as numbers (`paired`)."""
    keep = []
    for r in rows:
        best = r.best_hbm_only_peer or ""
        wanted = r.router in (best, tiers.OURS) or r.router == r.best_peer
        if r.tier != tiers.CEILING and wanted:
            keep.append(
                {
                    "cell": r.cell,
                    **r.cells(),
                    "best_hbm_only_peer": best,
                    "paired": {
                        "vs_hbm_only": paired(r.vs_hbm),
                        "vs_best_peer": paired(r.vs_peer),
                        "vs_best_peer_e2e": paired(r.vs_peer_e2e),
                        # goal 2's narrower reading: the better of the peers pricing tiers
                        "pricing_peer": r.pricing_peer,
                        "vs_pricing_peer": paired(r.vs_pricing),
                        "vs_pricing_peer_e2e": paired(r.vs_pricing_e2e),
                    },
                }
            )
    return keep


def best_vs_best(df: pl.DataFrame, rows: list[tiers.Row]) -> list[dict[str, Any]]:
    """The other reading of goal 1: per cell, the best peer with each host setup against the
    best peer with HBM only (each picked by pooled TTFT p90 from the runs it is compared on,
    as the study picks them: `tiers.Row.best_peer`; they may be different routers), paired
    over the seeds with the study's `compare`. Beside it, the per-seed TTFT p90 of both (what
    the interval spans). `df`: the study's `tiers.simulated` runs, `rows` their `cell_rows`."""
    out = []
    for cell in sorted(set(df["cell"])):
        at = df.filter(pl.col("cell") == cell)
        best_of = {r.tier: r.best_peer for r in rows if r.cell == cell}

        def best(tier: str, best_of: dict[str, str | None] = best_of, cell: str = cell) -> str:
            found = best_of.get(tier)
            if found is None:
                raise ValueError(f"{cell}: no peer ran with {tier}")
            return found

        base = best(tiers.HBM_ONLY)
        for tier in sorted(set(best_of) - {tiers.HBM_ONLY, tiers.CEILING}):
            cand = best(tier)
            arms = at.filter(
                ((pl.col("tier") == tiers.HBM_ONLY) & (pl.col("policy") == base))
                | ((pl.col("tier") == tier) & (pl.col("policy") == cand))
            ).with_columns(pl.col("tier").alias("arm"))
            r = compare(arms, tiers.HBM_ONLY, tier, "ttft_p90", by="arm")
            per_seed = (
                arms.group_by("arm", "seed")
                .agg(pl.col("ttft_s").quantile(0.9).alias("p90"))
                .sort("seed")
            )
            out.append(
                {
                    "cell": cell,
                    "tier": tier,
                    "hbm_only_best": base,
                    "tier_best": cand,
                    "ttft_p90_vs_hbm_only": diff_cell(r),
                    "paired": paired(r),
                    "per_seed_p90_s": {
                        arm: [round(v, 2) for v in per_seed.filter(pl.col("arm") == arm)["p90"]]
                        for arm in (tiers.HBM_ONLY, tier)
                    },
                }
            )
    return out


def _cells(rows: list[dict[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["cell"], r["tiers"]) for r in rows))


def table(summaries: list[dict[str, Any]]) -> str:
    """docs/kv_tiers/study_followups.md's two tables from summaries of the same cells over different
    seed counts (the last one's goal-2 columns): goal 1, the best HBM-only peer with each host setup
    against HBM only, and the best peer with the setup against the best HBM-only peer; goal 2,
    predicted_ttft against each setup's best peer, TTFT p90 / E2E p90."""
    last = summaries[-1]
    ns = [len(s["seeds"]) for s in summaries]
    head = " | ".join(f"{n} seeds" for n in ns)
    out = [
        f"| cell | tiers | best HBM-only peer | same router: {head} | "
        f"best peer with the tier ({ns[-1]} seeds) |",
        "|---|---|---|" + "---|" * len(ns) + "---|",
    ]
    for cell, tier in _cells(last["rows"]):
        if tier == "HBM only":
            continue
        best = next(r for r in last["rows"] if r["cell"] == cell)["best_hbm_only_peer"]
        gains = []
        for s in summaries:
            hit = [
                r
                for r in s["rows"]
                if (r["cell"], r["tiers"]) == (cell, tier) and r["router"].split()[0] == best
            ]
            gains.append(hit[0]["vs HBM only"] if hit else "-")
        bvb = next(b for b in last["best_vs_best"] if (b["cell"], b["tier"]) == (cell, tier))
        out.append(
            f"| {cell} | {tier} | {best} | {' | '.join(gains)} | "
            f"{bvb['tier_best']}: {bvb['ttft_p90_vs_hbm_only']} |"
        )
    out += [
        "",
        "| cell | tiers | best peer | predicted_ttft vs best peer, TTFT p90 | E2E p90 |",
        "|---|---|---|---|---|",
    ]
    for cell, tier in _cells(last["rows"]):
        at = [r for r in last["rows"] if (r["cell"], r["tiers"]) == (cell, tier)]
        peer = next(r["router"].split()[0] for r in at if "(best peer)" in r["router"])
        ours = next(r for r in at if r["router"].startswith("predicted_ttft"))
        out.append(
            f"| {cell} | {tier} | {peer} | {ours['vs best peer']} | {ours['vs best peer e2e']} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["seeds", "heldout", "deployments", "subagents"])
    ap.add_argument("--results", type=Path)
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (11 / 5 / 11 by part)")
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--analyse-only", action="store_true", help="skip the runs (they are in RESULTS)"
    )
    ap.add_argument("--table", type=Path, nargs="+", help="print the tables of these summaries")
    args = ap.parse_args()
    if args.table:
        print(table([json.loads(p.read_text()) for p in args.table]))
        return 0
    if not (args.part and args.results and args.out):
        ap.error("--part, --results and --out are required unless --table")

    if args.part == "seeds":
        exps, configured = seeds_part(args.seeds or 11)
    elif args.part == "heldout":
        exps, configured = heldout_part(args.seeds or 5), []
    elif args.part == "subagents":
        exps, configured = subagents_part(args.seeds or 5), []
    else:
        exps, configured = deployments_part(args.seeds or 11), []
    plan = expand(exps, REPO)
    n = len({r.seed for r in plan.runs})
    plan_path = args.results / f"work/plan_{n}seeds.json"
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_text(json.dumps(plan.to_json()))

    batches: dict[str, dict[str, float]] = {}
    if args.analyse_only:
        old = json.loads(args.out.read_text()) if args.out.exists() else {}
        batches = old.get("batches", {})
    elif configured:
        batches["configured_seeds"] = run_batch(plan, args.results, set(configured))
        extra = {r.seed for r in plan.runs} - set(configured)
        if extra:  # none with --seeds at most the configured count: run-batch needs a spec
            batches["extra_seeds"] = run_batch(plan, args.results, extra)
    else:
        batches["all"] = run_batch(plan, args.results, None)

    t0 = time.perf_counter()
    section = run_study(
        "tiers",
        args.results,
        None,
        plan_path,
        args.results / f"tables_{n}seeds",
        args.results / f"figures_{n}seeds",
    )
    analysis_s = time.perf_counter() - t0
    df = tiers.simulated(load_study("tiers", args.results, None, plan_path).requests)
    rows = tiers.cell_rows(df)
    out = {
        **stamp("tiers_agentic_seeds"),
        "part": args.part,
        "seeds": sorted({r.seed for r in plan.runs}),
        "batches": batches,
        "analysis_wall_s": analysis_s,
        "answer": section.answer,
        "rows": summary(rows),
        "best_vs_best": best_vs_best(df, rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("batches", "answer")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
