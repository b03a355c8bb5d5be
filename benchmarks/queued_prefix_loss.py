"""Prefixes lost while queued: would another instance have served those requests better?

A request that waits in an instance's queue can lose part of its cached HBM prefix to the
allocations of the requests admitted ahead of it (vLLM does not pin a waiting request's prefix
hit; neither does the simulator), so even a router that knows every engine's cache when it routes
(the exact view) over-predicts those requests' hits, and they are the slow ones
(docs/kv_tiers/study_followups.md, "The estimated view's errors"). Pricing the prefix's survival
in the router's score would help only if the decisions it would change are wrong. This runs
predicted_ttft with the counterfactual regret instrument at every decision
(instruments/regret.py: each alternative placement forked and played forward) and compares the
decisions whose request lost prefix blocks while queued with the others: their regret, and
whether their best alternative is another instance. The pre-registered reading is in
docs/kv_tiers/study_followups.md, "Prefixes lost while queued".

    nice -n 10 .venv/bin/python benchmarks/queued_prefix_loss.py \\
        --out results/bench/queued_prefix_loss.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from tiers_sweep import study  # a sibling script (benchmarks/ is on the path)

from agentic_kvc.config import load_config, override_item
from agentic_kvc.instruments.regret import RegretSettings, run_regret
from agentic_kvc.instruments.stats import mean_ci
from agentic_kvc.io import atomic_write_json
from agentic_kvc.runs import hardware_info
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
# cell -> the tiers study's experiment (config/config.yaml), replicated by its session jitter
CELLS = {"tracelab_x2": "tiers_tracelab_hi", "tracelab_x1": "tiers_tracelab_lo"}
HOSTS = [0.0, 16.0]
SEEDS = list(range(11))
POLICY = "predicted_ttft"
REGRET = RegretSettings(every=1, horizon_s=10.0)


def lost_tokens(row: dict[str, Any]) -> int | None:
    """HBM prefix tokens the chosen instance held at the decision and the request did not get
    at admission (its own fork); None when it was never admitted in the fork."""
    got = row["outcomes"].get("policy", {}).get("cached_tokens")
    if got is None:
        return None
    chosen = row["placements"]["policy"][0]
    return int(row["true_cached_tokens"][chosen]) - int(got)


def best_elsewhere(row: dict[str, Any], metric: str = "fleet_ttft_s") -> bool:
    """Whether the best alternative on `metric` places the request on another instance."""
    best = row.get(f"best_{metric}")
    return best is not None and row["placements"][best] != row["placements"]["policy"]


def classify(rows: list[dict[str, Any]], block_size: int) -> list[dict[str, Any]]:
    """One flat row per decision: lost tokens, lost (at least a block), regrets, best elsewhere."""
    out = []
    for r in rows:
        lost = lost_tokens(r)
        if lost is None:
            continue
        out.append(
            {
                "lost_tokens": max(lost, 0),
                "lost": lost >= block_size,
                "regret_fleet_ttft_s": r["regret_fleet_ttft_s"],
                "regret_ttft_s": r["regret_ttft_s"],
                "best_elsewhere": best_elsewhere(r),
            }
        )
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def seed_summary(decisions: list[dict[str, Any]], input_tokens: int) -> dict[str, Any]:
    """One run's numbers: shares, the two groups' mean regrets and their differences."""
    lost = [d for d in decisions if d["lost"]]
    other = [d for d in decisions if not d["lost"]]
    out: dict[str, Any] = {
        "decisions": len(decisions),
        "lost_decisions": len(lost),
        "lost_token_share": sum(d["lost_tokens"] for d in lost) / input_tokens
        if input_tokens
        else None,
        "lost_best_elsewhere": sum(d["best_elsewhere"] for d in lost),
    }
    total = sum(d["regret_fleet_ttft_s"] or 0.0 for d in decisions)
    recoverable = sum(d["regret_fleet_ttft_s"] or 0.0 for d in lost if d["best_elsewhere"])
    out["recoverable_regret_share"] = recoverable / total if total > 0 else None
    for m in ("regret_fleet_ttft_s", "regret_ttft_s"):
        a = _mean([d[m] for d in lost if d[m] is not None])
        b = _mean([d[m] for d in other if d[m] is not None])
        out[f"lost_{m}"] = a
        out[f"other_{m}"] = b
        out[f"diff_{m}"] = a - b if a is not None and b is not None else None
    return out


def cell_summary(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the cell's seeds: pooled shares, and each regret difference's mean over seeds with
    its bootstrap interval (seeds without a lost-prefix decision are left out of it)."""
    n = sum(s["decisions"] for s in seeds)
    lost = sum(s["lost_decisions"] for s in seeds)
    out: dict[str, Any] = {
        "decisions": n,
        "lost_share": lost / n if n else None,
        "lost_token_share_mean": _mean(
            [s["lost_token_share"] for s in seeds if s["lost_token_share"] is not None]
        ),
        "lost_best_elsewhere_share": sum(s["lost_best_elsewhere"] for s in seeds) / lost
        if lost
        else None,
        "recoverable_regret_share_mean": _mean(
            [
                s["recoverable_regret_share"]
                for s in seeds
                if s["recoverable_regret_share"] is not None
            ]
        ),
    }
    for m in ("regret_fleet_ttft_s", "regret_ttft_s"):
        diffs = [s[f"diff_{m}"] for s in seeds if s[f"diff_{m}"] is not None]
        mean, lo, hi = mean_ci(diffs)
        out[f"diff_{m}"] = {"mean": mean, "ci_low": lo, "ci_high": hi, "seeds": len(diffs)}
        out[f"lost_{m}_mean"] = _mean([s[f"lost_{m}"] for s in seeds if s[f"lost_{m}"] is not None])
        out[f"other_{m}_mean"] = _mean(
            [s[f"other_{m}"] for s in seeds if s[f"other_{m}"] is not None]
        )
    return out


def verdict(cell: dict[str, Any]) -> str:
    """The pre-registered reading (a), (b) or (c) for one cell."""
    d = cell["diff_regret_fleet_ttft_s"]
    if not d["ci_low"] > 0:
        return "c"
    share = cell["lost_best_elsewhere_share"]
    return "a" if share is not None and share >= 0.5 else "b"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    args = ap.parse_args()
    wanted = args.cells.split(",")
    unknown = sorted(set(wanted) - set(CELLS))
    if unknown:
        ap.error(f"--cells: unknown {unknown}; known: {list(CELLS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.monotonic()
    runs: list[dict[str, Any]] = []
    cells: list[dict[str, Any]] = []
    for name in wanted:
        exp = study(CELLS[name])
        sets = [override_item(k, v) for k, v in exp["set"].items()]
        for host in HOSTS:
            per_seed = []
            for seed in seeds:
                run_sets = [
                    *sets,
                    f"policy.name={POLICY}",
                    f"fleet.kv_tiers.host_gib={host}",
                    f"seed={seed}",
                ]
                config = load_config(REPO / exp["base"], run_sets)
                workload = load_workload(config.workload, config.seed)
                c0 = time.process_time()
                records, rows = run_regret(config, workload, profile_for(config), REGRET)
                cpu = time.process_time() - c0
                decisions = classify(rows, config.fleet.block_size)
                n_in = sum(r.input_tokens for r in records)
                s = seed_summary(decisions, n_in)
                s.update(workload=name, host_gib=host, seed=seed, cpu_s=round(cpu, 2))
                per_seed.append(s)
                runs.append(s)
                print(s, flush=True)
            c = cell_summary(per_seed)
            c.update(workload=name, host_gib=host, verdict=verdict(c))
            cells.append(c)
            d = c["diff_regret_fleet_ttft_s"]
            print(
                f"{name} host {host:g}: lost {c['lost_share']:.1%} of decisions; fleet-TTFT regret"
                f" lost minus other {1e3 * d['mean']:+.1f} ms [{1e3 * d['ci_low']:+.1f},"
                f" {1e3 * d['ci_high']:+.1f}]; best elsewhere in"
                f" {c['lost_best_elsewhere_share'] or 0:.0%}; reading ({c['verdict']})",
                flush=True,
            )
    atomic_write_json(
        args.out,
        {
            "benchmark": "queued_prefix_loss",
            "command": "benchmarks/queued_prefix_loss.py"
            f" --cells {args.cells} --seeds {args.seeds}",
            "machine": hardware_info(),
            "parameters": {
                "policy": POLICY,
                "cells": {n: CELLS[n] for n in wanted},
                "hosts_gib": HOSTS,
                "seeds": seeds,
                "regret_every": REGRET.every,
                "regret_horizon_s": REGRET.horizon_s,
            },
            "interval": "instruments.stats.mean_ci: 95% bootstrap over the cell's seeds of each "
            "seed's difference (lost-prefix decisions' mean regret minus the others')",
            "wall_s": round(time.monotonic() - t0, 1),
            "runs": runs,
            "cells": cells,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
