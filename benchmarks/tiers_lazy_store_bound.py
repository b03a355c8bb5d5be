"""Do the tiers study's answers depend on when the lazy tier stores (issue 29 item 1, goals 1-2)?

docs/kv_tiers.md, "When the lazy mode stores", and docs/kv_tiers/study_followups.md, "If the
lazy tier stored when blocks are freed" (pre-registered there before any run). The study's
simulated engines store a block in the host tier when HBM evicts it (`fleet.kv_tiers.lazy_store:
walk`, which on the study's pools, 18,547 or 4,096 blocks against a walk of 1,024, is that).
Read from vLLM 0.32's code, on a GPU the lazy walk may instead store most freed blocks soon
after they are freed: it restarts at the free queue's head while copies are in flight, and
each stored block goes back to the queue's tail, so the walk moves on to the next unstored
ones. Not measured on a GPU (none lent). The far end of that is `lazy_store: free`: every
turn's full blocks stored when it ends (HBM's evictions still store what is missing), so the
host tier also holds what HBM still has. This runs the study's cells both ways: the two ends
bound what the unmeasured behaviour can do to the study's answers.

Cells (the study's settings from config/config.yaml, fixed before any run): agentic-long at
0.05 and 0.1 sessions/s (`tiers_agentic_lo`, `_hi`; seeds 0-4), host 16 and 128 GiB; Mooncake
x0.2 (`tiers_mooncake_hi`; its three 600 s windows), host 16 and 128 GiB; TraceLab x2
(`tiers_tracelab_hi`; seeds 0-10 of the session jitter), host 16 GiB; held out (no issue names
it): the Mooncake trace on 8 x H20 at x0.4, host 16 GiB. Per cell every router of the study
(`tiers.ROUTERS`) with `walk` and with `free`, and HBM only (the same runs for both).

Per cell, paired over its replicates (agentic_kvc.paired, through tiers_tracelab_gap's
`compare`; TTFT p90 / E2E p90):
- each router, `free` against `walk`, and its host-token share under each;
- the tier's gain as the study states it (the best HBM-only peer, with the tier against
  without), under each;
- ours (predicted_ttft) against the best peer, and against the better of the peers that price
  tiers (`tiers.PRICING_PEERS`), under each;
- `same_verdict`: whether each of those three reads the same under both (sign of the point
  estimate, and whether the interval excludes 0).

    nice -n 10 .venv/bin/python benchmarks/tiers_lazy_store_bound.py \\
        --results /tmp/akvc_lazy_results --out results/bench/tiers_lazy_store_bound.json

`--table` prints the JSON as the docs' tables; CLI, loop, JSON: benchmarks/tiers_sweep.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.tiers import ttft_reading
from agentic_kvc.analysis.studies import tiers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiers_sweep import WINDOWS, Rows, Run, Unit, cell_runs, ci_cell, per_host, pooled, study
from tiers_sweep import main as sweep
from tiers_tracelab_gap import compare

MODELS = ("walk", "free")  # fleet.kv_tiers.lazy_store: the study's, and the far end
HBM = "hbm"  # the HBM-only runs' label suffix
PEERS = tuple(r for r in tiers.ROUTERS if r != tiers.OURS)


def label(router: str, model: str) -> str:
    return f"{router}|{model}"


def cells() -> list[dict[str, Any]]:
    """Each: name, base, fixed settings, the replicate key and values, the host sizes."""
    seeds5, seeds11 = ("seed", list(range(5))), ("seed", list(range(11)))
    windows = ("workload.window_s", WINDOWS)
    moon8 = study("tiers_mooncake_hi")
    moon8["set"].update({"fleet.instances": 8, "workload.rate_scale": 0.4})
    return [
        {
            "name": "agentic-long_0.05",
            **study("tiers_agentic_lo"),
            "rep": seeds5,
            "hosts": [16, 128],
        },
        {
            "name": "agentic-long_0.1",
            **study("tiers_agentic_hi"),
            "rep": seeds5,
            "hosts": [16, 128],
        },
        {"name": "mooncake_x0.2", **study("tiers_mooncake_hi"), "rep": windows, "hosts": [16, 128]},
        {"name": "tracelab_x2", **study("tiers_tracelab_hi"), "rep": seeds11, "hosts": [16]},
        {"name": "heldout_mooncake_8xH20_x0.4", **moon8, "rep": windows, "hosts": [16]},
    ]


def specs(cell: dict[str, Any], host: float) -> list[Run]:
    """Per replicate: every router HBM only, and with the host tier under each store model."""
    setups = {HBM: ["fleet.kv_tiers.host_gib=0"]}
    for m in MODELS:
        setups[m] = [f"fleet.kv_tiers.host_gib={host:g}", f"fleet.kv_tiers.lazy_store={m}"]
    return [
        run
        for m, tier in setups.items()
        for run in cell_runs(cell, {label(r, m): {"name": r} for r in tiers.ROUTERS}, tier)
    ]


def analyse(unit: Unit, rows: Rows, _results: Path) -> dict[str, Any]:
    n = unit.instances
    summ = {lab: pooled(rows, lab) for lab in dict.fromkeys(lab for lab, _r, _s in rows)}
    best_hbm = tiers.best_peer_of({p: summ[label(p, HBM)] for p in PEERS}, PEERS)
    assert best_hbm is not None
    res: dict[str, Any] = {
        "replicates": len(unit.cell["rep"][1]),
        "best_hbm_only_peer": best_hbm,
        "ttft_p90_s": {k: round(v["ttft_p90"], 4) for k, v in summ.items()},
        "host_share": {k: round(v["host"], 4) for k, v in summ.items() if not k.endswith(HBM)},
        "free_vs_walk": {
            r: compare(rows, label(r, "walk"), label(r, "free"), n) for r in tiers.ROUTERS
        },
        "models": {},
    }
    for m in MODELS:
        here = {p: summ[label(p, m)] for p in PEERS}
        best = tiers.best_peer_of(here, PEERS)
        pricing = tiers.best_peer_of(here, tiers.PRICING_PEERS)
        assert best is not None and pricing is not None
        res["models"][m] = {
            "tier_gain": compare(rows, label(best_hbm, HBM), label(best_hbm, m), n),
            "best_peer": best,
            "ours_vs_best_peer": compare(rows, label(best, m), label(tiers.OURS, m), n),
            "pricing_peer": pricing,
            "ours_vs_pricing_peer": compare(rows, label(pricing, m), label(tiers.OURS, m), n),
        }
    walk, free = res["models"]["walk"], res["models"]["free"]
    res["same_verdict"] = {
        k: ttft_reading(walk[k]) == ttft_reading(free[k])
        for k in ("tier_gain", "ours_vs_best_peer", "ours_vs_pricing_peer")
    }
    return res


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Over every cell: runs, the batch CPU seconds of the call that wrote the file, and the
    readings (of the three per cell) that differ between the two store models."""
    cells_ = report["cells"]
    return {
        "runs": sum(c["runs"] for c in cells_.values()),
        "batch_cpu_s": round(sum(c["batch_cpu_s"] for c in cells_.values()), 1),
        "readings_changed": sorted(
            f"{key}: {what}"
            for key, c in cells_.items()
            for what, same in c["same_verdict"].items()
            if not same
        ),
    }


def table(units: dict[str, Any]) -> str:
    """The docs' two tables: the study's three readings under each model, then each router's
    `free` against `walk` with its host share under each."""
    out = [
        "| cell | store | tier's gain (best HBM-only peer) | ours vs best peer | "
        "ours vs better pricing peer |",
        "|---|---|---|---|---|",
    ]
    for key, c in units.items():
        for m in MODELS:
            x = c["models"][m]
            out.append(
                f"| {key} | {m} | {c['best_hbm_only_peer']}: {ci_cell(x['tier_gain'])} | "
                f"{x['best_peer']}: {ci_cell(x['ours_vs_best_peer'])} | "
                f"{x['pricing_peer']}: {ci_cell(x['ours_vs_pricing_peer'])} |"
            )
    out += ["", "| cell | router | free vs walk | host share walk -> free |", "|---|---|---|---|"]
    for key, c in units.items():
        for r, v in c["free_vs_walk"].items():
            sh = c["host_share"]
            out.append(
                f"| {key} | {r} | {ci_cell(v)} | {100 * sh[label(r, 'walk')]:.1f}% -> "
                f"{100 * sh[label(r, 'free')]:.1f}% |"
            )
    return "\n".join(out)


def main() -> int:
    return sweep(
        "tiers_lazy_store_bound",
        __doc__,
        Path("/tmp/akvc_lazy_results"),
        lambda: per_host(cells(), specs),
        analyse,
        table,
        layout="cells",
        headline=headline,
    )


if __name__ == "__main__":
    raise SystemExit(main())
