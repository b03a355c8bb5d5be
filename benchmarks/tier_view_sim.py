"""The real engines' tier-view check (benchmarks/tier_view_real.py) in the simulator, under the two
rules for when a lazy host tier whose walk covers the HBM pool stores a freed block.

On real vLLM CPU engines the router's estimated view with the engines' tier (`--tier-view`)
expected 1.11x the host tokens the engines' host tiers served, only ever over-expecting, while
the exact view (KV events) expected 0.85x (docs/kv_tiers_real.md section 8). vLLM 0.32 stores a
freed block at the next scheduler step, after that step's allocations, so a request waiting for
blocks takes a finishing prompt's tail unstored (benchmarks/tier_store_race_real.py); the
estimate stores every routed prompt. The simulator now stores in vLLM's order
(`fleet.kv_tiers.lazy_store: walk`, sim/engine.py `_store_freed`) and `free` stores each turn
as it ends (the estimate's own rule, and the simulator's before 2026-12-02). If the step order
is what the estimate misses, the estimated view over-expects under `walk` and not under `free`,
and the exact view follows the tier under both.

The same fleet, workload, host tier and router as tier_view_real (config/runs/
real_cpu_tiers.yaml with a 64 MiB host tier, predicted_ttft on the cpu-tiny profile), with
`backend: sim`; seeds 0-4 of the workload (a simulated repeat of one seed is the same run).
Per run, from the records: the host tokens the view expected on the chosen instance
(`predicted_host_tokens`, asked before the prompt is recorded, as the proxy does) over the host
tokens the engine loaded (`host_tokens`); and, per request, the view's whole expectation (HBM,
then host) against the engine's cached tokens (HBM hit plus loads): expected and not served,
served and not expected, as shares of the cached tokens.

    .venv/bin/python benchmarks/tier_view_sim.py --out results/bench/tier_view_sim.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from tier_view_real import host_expectation  # a sibling script (benchmarks/ on the path)

from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.runs import git_info, hardware_info
from agentic_kvc.sim.run_backend import run_sim

BASE = "config/runs/real_cpu_tiers.yaml"
SETS = [
    "backend=sim",
    "fleet.kv_tiers.host_gib=0.0625",
    "policy.name=predicted_ttft",
    "policy.params.hardware=cpu-tiny",
    "policy.params.model=tiny",
    "policy.params.max_num_batched_tokens=8192",
]
STORES = ("walk", "free")
VIEWS = ("estimated", "exact")


def run_row(store: str, view: str, seed: int) -> dict[str, Any]:
    """One simulated run's expectation against what its engines served."""
    sets = [*SETS, f"fleet.kv_tiers.lazy_store={store}", f"policy.cache_view={view}"]
    config = load_config(Path(BASE), [*sets, f"seed={seed}"])
    with tempfile.TemporaryDirectory() as tmp:
        records = run_sim(config, Path(tmp)).records
    ok = [r for r in records if r.get("error") is None]
    over = under = 0
    for r in ok:
        gap = (
            (r.get("predicted_cached_tokens") or 0)
            + (r.get("predicted_host_tokens") or 0)
            - (r.get("cached_tokens") or 0)
            - (r.get("host_tokens") or 0)
        )
        over += max(gap, 0)
        under += max(-gap, 0)
    return {
        "store": store,
        "view": view,
        "seed": seed,
        "requests": len(records),
        "errors": len(records) - len(ok),
        "input_tokens": sum(r["input_tokens"] for r in ok),
        "cached_tokens": sum(
            (r.get("cached_tokens") or 0) + (r.get("host_tokens") or 0) for r in ok
        ),
        "engine_host_tokens": sum(r.get("host_tokens") or 0 for r in ok),
        "predicted_host_tokens": sum(r.get("predicted_host_tokens") or 0 for r in ok),
        "expected_not_served": over,
        "served_not_expected": under,
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for store in STORES:
        for view in VIEWS:
            mine = [r for r in rows if r["store"] == store and r["view"] == view]
            cached = sum(r["cached_tokens"] for r in mine)
            out[f"{store}/{view}"] = {
                **host_expectation(mine),
                "expected_not_served_share": sum(r["expected_not_served"] for r in mine)
                / max(cached, 1),
                "served_not_expected_share": sum(r["served_not_expected"] for r in mine)
                / max(cached, 1),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    t0 = time.monotonic()
    rows = []
    for store in STORES:
        for view in VIEWS:
            for seed in range(args.seeds):
                rows.append(run_row(store, view, seed))
                print(rows[-1], flush=True)
    per_cell = summarise(rows)
    atomic_write_json(
        args.out,
        {
            "benchmark": "tier_view_sim",
            "command": f"benchmarks/tier_view_sim.py --seeds {args.seeds}",
            "base": BASE,
            "sets": SETS,
            "machine": hardware_info(),
            "git": git_info(),
            "wall_s": round(time.monotonic() - t0, 1),
            "runs": rows,
            "per_cell": per_cell,
        },
    )
    for cell, v in per_cell.items():
        print(cell, {k: round(x, 3) if isinstance(x, float) else x for k, x in v.items()})


if __name__ == "__main__":
    main()
