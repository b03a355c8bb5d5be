"""Why predicted_ttft's prefix-hit rate is lower on long contexts (issue 31 item 3).

On a robustness-sweep scenario (default `long_ctx_pauses`: 50k-150k-token prompts, minute-long
tool pauses) it runs `predicted_ttft` and `sglang_cache_aware` and splits each policy's missed
prompt tokens by where they come from: first turns (nothing to hit), later turns that stayed
on their session's previous instance (evicted meanwhile), and later turns that moved. Then it
runs the regret instrument (instruments/regret.py: fork at every `--every`th decision, run each
alternative placement forward `--horizon` seconds) on `predicted_ttft` and reports, for the
sampled decisions that moved a session, what the move did to the request's TTFT and to the
fleet's mean TTFT against staying (the `affinity` alternative).

    flock /tmp/akvc_cpu.lock .venv/bin/python benchmarks/policy_moves.py --seeds 2 \\
        --out results/bench/policy_moves.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.instruments.regret import RegretSettings, run_regret
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

# The sweep's machinery, imported by name from this folder (also when this script is loaded by
# path, as workflow/scripts/sweep_batch.py does): one module object however it is reached.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import policy_robustness as rb


def miss_sources(df: pl.DataFrame) -> dict:
    """Missed prompt tokens by first turn / later turn that stayed / later turn that moved."""
    df = df.filter(pl.col("error") == "").with_columns(
        pl.col("request_id").str.replace(r"-t\d+$", "").alias("sid"),
        pl.col("request_id").str.extract(r"-t(\d+)$").cast(pl.Int64).alias("turn"),
    )
    df = df.sort(["sid", "turn"]).with_columns(
        pl.col("prefill_instance").shift(1).over("sid").alias("prev")
    )
    miss = pl.col("input_tokens") - pl.col("cached_tokens")
    first = df.filter(pl.col("prev").is_null())
    later = df.filter(pl.col("prev").is_not_null())
    moved = later.filter(pl.col("prev") != pl.col("prefill_instance"))
    stayed = later.filter(pl.col("prev") == pl.col("prefill_instance"))
    return {
        "hit_rate": float(df["cached_tokens"].sum() / df["input_tokens"].sum()),
        "later_turns": later.height,
        "moved_turns": moved.height,
        "missed_tokens_first_turns": int(first.select(miss.sum()).item()),
        "missed_tokens_stayed": int(stayed.select(miss.sum()).item()),
        "missed_tokens_moved": int(moved.select(miss.sum()).item()),
        "stayed_hit_rate": float(stayed["cached_tokens"].sum() / stayed["input_tokens"].sum()),
        "ttft_p90_s": float(df["ttft_s"].quantile(0.9, "linear")),
    }


def moves_regret(scenario: str, seed: int, every: int, horizon_s: float) -> dict:
    """Regret rows of predicted_ttft; for the sampled moves, move minus stay."""
    _, base, sets = rb.SCENARIOS[scenario]
    rep = rb.replicate_sets(base, seed)
    cfg = load_config(
        rb.REPO / base, [*sets, *rep, *rb.policy_sets("predicted_ttft", base, [*sets, *rep])]
    )
    settings = RegretSettings(every=every, horizon_s=horizon_s)
    _recs, rows = run_regret(cfg, load_workload(cfg.workload, cfg.seed), profile_for(cfg), settings)
    later = [r for r in rows if r["turn"] > 0 and "affinity" in r["outcomes"]]
    moved = [r for r in later if r["placements"]["policy"] != r["placements"]["affinity"]]
    d_own = np.array(
        [r["outcomes"]["policy"]["ttft_s"] - r["outcomes"]["affinity"]["ttft_s"] for r in moved]
    )
    d_fleet = np.array(
        [
            r["outcomes"]["policy"]["fleet_ttft_s"] - r["outcomes"]["affinity"]["fleet_ttft_s"]
            for r in moved
        ]
    )
    winners: dict[str, int] = {}
    for r in moved:
        winners[r["best_ttft_s"]] = winners.get(r["best_ttft_s"], 0) + 1
    return {
        "sampled_decisions": len(rows),
        "sampled_later_turns": len(later),
        "sampled_moves": len(moved),
        "move_minus_stay_own_ttft_mean_s": float(d_own.mean()) if len(moved) else None,
        "move_minus_stay_fleet_ttft_mean_s": float(d_fleet.mean()) if len(moved) else None,
        "moves_better_for_request": float((d_own < 0).mean()) if len(moved) else None,
        "moves_better_for_fleet": float((d_fleet < 0).mean()) if len(moved) else None,
        "best_alternative_on_ttft_for_moves": winners,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenario", default="long_ctx_pauses")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--every", type=int, default=3, help="regret: fork every Nth decision")
    ap.add_argument("--horizon", type=float, default=120.0, help="regret: seconds forward")
    ap.add_argument("--work", type=Path, default=rb.REPO / "results" / "robustness")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.scenario not in rb.SCENARIOS:
        ap.error(f"--scenario: unknown {a.scenario!r}; policy_robustness.py --list names them")
    t0 = time.perf_counter()
    out: dict = {"benchmark": "policy_moves", "scenario": a.scenario, "seeds": []}
    for seed in range(a.seeds):
        row: dict = {"seed": seed}
        for pol in ("predicted_ttft", "sglang_cache_aware"):
            row[pol] = miss_sources(rb.run_one(a.scenario, pol, seed, a.work))
        row["regret"] = moves_regret(a.scenario, seed, a.every, a.horizon)
        out["seeds"].append(row)
        print(json.dumps(row), flush=True)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
