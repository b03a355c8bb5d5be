"""predicted_ttft with `opening: near_tie` against today's and the best peer (issue 29 goal 2).

docs/kv_tiers/study_followups.md, TraceLab part, section 9. With tiers neither predicted_ttft nor
sticky_least_loaded moves a session, so the TraceLab x2 gap between them is where the 48
sessions open; `opening: near_tie` keeps today's score and, for a request that opens a session
(no cache of its own), sends it among the near-ties (score within its own prefill on an idle
instance of the best) to the one with the fewest open sessions. Same cells, replicates and
pairing as benchmarks/tiers_opening_lifetime.py (whose `cells()` this reuses): every tiers
study cell and three held-out workloads, through `akvc run-batch` into a scratch results
folder (one process, one cell at a time), TTFT p90 / E2E p90 paired over the replicates.

    nice -n 10 .venv/bin/python benchmarks/tiers_opening_near_tie.py \\
        --results /tmp/akvc_k9_results --out results/bench/tiers_opening_near_tie.json

`--table` prints the JSON as docs/kv_tiers/study_followups.md's table; CLI, loop, JSON:
benchmarks/tiers_sweep.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.analysis.bench_summary.tiers import worst_peer_of_today
from agentic_kvc.config import override_item

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiers_opening_lifetime import TODAY, cells
from tiers_sweep import Rows, Run, Unit, cell_runs, ci_cell, per_host
from tiers_sweep import main as sweep
from tiers_tracelab_gap import compare

NEAR_TIE = {"name": "predicted_ttft", "params": {"opening": "near_tie"}}


def specs(cell: dict[str, Any], host: float) -> list[Run]:
    """(variant, replicate, overrides) of one cell and host size."""
    pols = {"today": TODAY, "near_tie": NEAR_TIE, **cell["peers"]}
    return cell_runs(cell, pols, [override_item("fleet.kv_tiers.host_gib", host)])


def openings_moved(rows: Rows, label: str = "near_tie") -> dict[str, Any]:
    """Over the runs of `label` (a near-tie opening rule): requests placed as openings (their
    receipt carries the band), the band's median and 90th percentile (s), those sent off the
    best score to an instance with fewer open sessions, the median of their score above the
    best (s), and, against the same request in today's run of the same replicate, their mean
    TTFT and E2E change (s)."""
    today = {rep: {r["request_id"]: r for r in recs} for lab, rep, recs in rows if lab == "today"}
    bands: list[float] = []
    above: list[float] = []
    d_ttft: list[float] = []
    d_e2e: list[float] = []
    reqs = 0
    for lab, rep, recs in rows:
        if lab != label:
            continue
        reqs += len(recs)
        for r in recs:
            sc = r.get("scores") or {}
            if "band" not in sc:
                continue
            bands.append(sc["band"])
            if r.get("reason") != "near_tie_fewer_sessions":
                continue
            per = [v for k, v in sc.items() if k.isdigit()]
            above.append(sc[str(r["prefill_instance"])] - min(per))
            t = today[rep].get(r["request_id"])
            if t is not None and None not in (r["ttft_s"], t["ttft_s"], r["e2e_s"], t["e2e_s"]):
                d_ttft.append(r["ttft_s"] - t["ttft_s"])
                d_e2e.append(r["e2e_s"] - t["e2e_s"])

    def q(xs: list[float], f: float) -> float | None:
        return round(float(np.quantile(xs, f)), 4) if xs else None

    def mean(xs: list[float]) -> float | None:
        return round(float(np.mean(xs)), 4) if xs else None

    return {
        "openings": len(bands),
        "band_s_p50": q(bands, 0.5),
        "band_s_p90": q(bands, 0.9),
        "moved": len(above),
        "moved_above_best_s_p50": q(above, 0.5),
        "moved_d_ttft_s_mean": mean(d_ttft),
        "moved_d_e2e_s_mean": mean(d_e2e),
        "requests": reqs,
    }


def table(units: dict[str, Any], label: str = "near_tie") -> str:
    """Per cell and host: near_tie against today's predicted_ttft, and near_tie's and today's
    against the best peer (the peer with the lowest TTFT p90 against today's); the openings
    near_tie sent off the best score, of all it placed as openings, the band, and what the
    moved openings' own TTFT and E2E changed against today's run (mean, s)."""
    rows = [
        f"| cell | {label} vs today | best peer | {label} vs peer | today vs peer | "
        "openings moved | band p50 / p90 (s) | moved: TTFT / E2E change (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, r in units.items():
        best = worst_peer_of_today(r)  # the peer today's predicted_ttft does worst against
        o = r["openings"]
        rows.append(
            f"| {key} | {ci_cell(r[f'{label}_vs_today'])} | {best} | "
            f"{ci_cell(r[f'{label}_vs_{best}'])} | {ci_cell(r[f'today_vs_{best}'])} | "
            f"{o['moved']} of {o['openings']} | {o['band_s_p50']} / {o['band_s_p90']} | "
            f"{o['moved_d_ttft_s_mean']} / {o['moved_d_e2e_s_mean']} |"
        )
    return "\n".join(rows)


def analyse(unit: Unit, rows: Rows, _results: Path, label: str = "near_tie") -> dict[str, Any]:
    """One cell and host: the openings near_tie moved, near_tie against today's, and both
    against each of the cell's peers."""
    n = unit.instances
    res: dict[str, Any] = {"openings": openings_moved(rows, label)}
    res[f"{label}_vs_today"] = compare(rows, "today", label, n)
    for peer in unit.cell["peers"]:
        for ours in (label, "today"):
            res[f"{ours}_vs_{peer}"] = compare(rows, peer, ours, n)
    return res


def main() -> int:
    return sweep(
        "tiers_opening_near_tie",
        __doc__,
        Path("/tmp/akvc_k9_results"),
        lambda: per_host(cells(), specs),
        analyse,
        table,
    )


if __name__ == "__main__":
    raise SystemExit(main())
