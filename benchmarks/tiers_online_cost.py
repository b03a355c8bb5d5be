"""predicted_ttft with its step cost fitted online, against today's and the best peer (issue 29).

Goal 2 of issue 29 asks whether our tier-aware routing leads the best peer's.

docs/kv_tiers/study_followups.md, "Goal 2 with a cost model fitted online". The tiers study runs
predicted_ttft with `cost_model: profile`: its step-cost coefficients are the simulated
engine's own profile, a near-oracle no real fleet hands a router. `cost_model: online` fits
them from the streams the router relays (profiles/online.py), from a generic prior
(`online_prior: generic`, the honest variant) or from the profile's fit (`online_prior:
profile`). This runs both beside today's predicted_ttft and the cell's peers on every cell of
the tiers study and the held-out workloads of benchmarks/tiers_opening_lifetime.py (whose
`cells()` this reuses, with two changes the question asks for: the agentic-long cells run HBM
only and host 128 GiB over seeds 0-4, the goal 2 setups, instead of host 16 GiB over seeds
0-2; Mooncake x0.2 adds host 16 GiB + a node's 1 TiB NVMe, `tiers_mooncake_hi_disk`), through
`akvc run-batch` into a scratch results folder (one process, one cell at a time), and pairs
TTFT p90 / E2E p90 over the replicates. Peers: the study's four (sglang_cache_aware,
llmd_precise, dynamo_kv, sticky_least_loaded) on every cell; the best peer is the one today's
predicted_ttft does worst against on TTFT p90, as tiers_opening_lifetime.py picks it.
Per cell it also keeps the online fit's state from the decision receipts
(`scores.cost_model`), rendered by the studies' own `online_fit_table`.

    nice -n 10 .venv/bin/python benchmarks/tiers_online_cost.py \\
        --results /tmp/akvc_k11_results --out results/bench/tiers_online_cost.json

`--table` prints the JSON as docs/kv_tiers/study_followups.md's tables; CLI, loop, JSON:
benchmarks/tiers_sweep.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl

from agentic_kvc.analysis.bench_summary.tiers import worst_peer_of_today
from agentic_kvc.analysis.studies import tiers
from agentic_kvc.analysis.studies.base import Section, StudyData
from agentic_kvc.analysis.studies.common import online_fit_table
from agentic_kvc.config import load_config, override_item

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiers_opening_lifetime import TODAY, cells
from tiers_sweep import REPO, Rows, Run, Unit, cell_runs, ci_cell, per_host, study
from tiers_sweep import main as sweep
from tiers_tracelab_gap import compare

ONLINE = {
    "online_generic": {
        "name": "predicted_ttft",
        "params": {"cost_model": "online", "online_prior": "generic"},
    },
    "online_profile": {
        "name": "predicted_ttft",
        "params": {"cost_model": "online", "online_prior": "profile"},
    },
}
# the tiers study's peers: every router it runs but ours
PEERS = {r: {"name": r} for r in tiers.ROUTERS if r != tiers.OURS}
DISK = "16+disk"  # host 16 GiB + a node's 1 TiB NVMe store, as tiers_mooncake_hi_disk


def our_cells() -> list[dict[str, Any]]:
    """tiers_opening_lifetime's cells with the study's four peers everywhere, agentic-long at
    host 0 / 128 GiB over seeds 0-4, and Mooncake x0.2 with the disk setup added."""
    out = []
    for cell in cells():
        cell = {**cell, "peers": dict(PEERS)}
        if cell["name"].startswith("agentic-long"):
            cell.update(hosts=[0, 128], rep=("seed", list(range(5))))
        if cell["name"] == "mooncake_x0.2":
            disk = study("tiers_mooncake_hi_disk")["set"]
            cell["disk_set"] = {k: v for k, v in disk.items() if k.startswith("fleet.kv_tiers.")}
            cell["hosts"] = [*cell["hosts"], DISK]
        out.append(cell)
    return out


def tier_sets(cell: dict[str, Any], host: float | str) -> list[str]:
    """The overrides of one tier setup: a host size in GiB, or DISK (the study's disk cell)."""
    if host == DISK:
        return [override_item(k, v) for k, v in cell["disk_set"].items()]
    return [override_item("fleet.kv_tiers.host_gib", host)]


def specs(cell: dict[str, Any], host: float | str) -> list[Run]:
    """(variant, replicate, overrides) of one cell and tier setup."""
    pols = {"today": TODAY, **ONLINE, **cell["peers"]}
    return cell_runs(cell, pols, tier_sets(cell, host))


def fit_block(results: Path, base: str, runs: list[Run], key: str) -> str | None:
    """The studies' online-fit table (analysis/studies/common.online_fit_table) over this
    cell's online runs, each variant labelled `key variant`; None without receipts."""
    got = []
    for lab, _rep, sets in runs:
        if lab not in ONLINE:
            continue
        path = results / "runs" / load_config(REPO / base, sets).run_id()
        manifest = json.loads((path / "manifest.json").read_text())
        run = SimpleNamespace(config=manifest.get("config", {}), path=path)
        got.append((run, SimpleNamespace(variant=f"{key} {lab}")))
    s = Section("tiers_online_cost", "", "")
    if not online_fit_table(s, StudyData(pl.DataFrame(), got), "tiers cells"):  # type: ignore[arg-type]
        return None
    return s.blocks[-1]


def table(units: dict[str, Any]) -> str:
    """Per cell and tier setup: each online form against today's predicted_ttft and against
    the best peer, and today's against the best peer (TTFT p90 / E2E p90, paired); then the
    online fits' state, one row per cell and form."""
    rows = [
        "| cell | best peer | today vs peer | generic vs today | generic vs peer | "
        "profile prior vs today | profile prior vs peer |",
        "|---|---|---|---|---|---|---|",
    ]
    fits: list[str] = []
    caption = header = ""
    for key, r in units.items():
        best = worst_peer_of_today(r)  # the report's own pick, read in one place
        rows.append(
            f"| {key} | {best} | {ci_cell(r[f'today_vs_{best}'])} | "
            f"{ci_cell(r['online_generic_vs_today'])} | "
            f"{ci_cell(r[f'online_generic_vs_{best}'])} | "
            f"{ci_cell(r['online_profile_vs_today'])} | "
            f"{ci_cell(r[f'online_profile_vs_{best}'])} |"
        )
        if r.get("fit"):
            caption, tab = r["fit"].split("\n\n", 1)
            lines = tab.splitlines()
            header = "\n".join(lines[:2])
            fits += lines[2:]
    out = "\n".join(rows)
    if fits:
        out += f"\n\n{caption}\n\n{header}\n" + "\n".join(fits)
    return out


def analyse(unit: Unit, rows: Rows, results: Path) -> dict[str, Any]:
    """One cell and tier setup: each online form against today's, each form and today's
    against each peer, and the online fits' state (`fit_block`)."""
    n = unit.instances
    res: dict[str, Any] = {}
    for lab in ONLINE:
        res[f"{lab}_vs_today"] = compare(rows, "today", lab, n)
    for peer in unit.cell["peers"]:
        for ours in ("today", *ONLINE):
            res[f"{ours}_vs_{peer}"] = compare(rows, peer, ours, n)
    res["fit"] = fit_block(results, unit.cell["base"], unit.runs, unit.key)
    return res


def main() -> int:
    return sweep(
        "tiers_online_cost",
        __doc__,
        Path("/tmp/akvc_k11_results"),
        lambda: per_host(our_cells(), specs),
        analyse,
        table,
        quiet=("fit",),
    )


if __name__ == "__main__":
    raise SystemExit(main())
