"""predicted_ttft with `opening: lifetime` against today's and the best peer (issue 29 goal 2).

docs/kv_tiers/study_followups.md, TraceLab part, section 7. A request that opens a session fixes
where its later turns run; `opening: lifetime` (policy/session_load.py) prices such a request's wait
and decode on each candidate by the stationary load the sessions homed there bring back (M/G/1 wait,
Little's-law decode concurrency) instead of the instance's state at this instant. This runs it on
every cell of the tiers study and on workloads no issue names, beside today's predicted_ttft and the
best peer, through `akvc run-batch` into a scratch results folder (one process, one cell at a time),
and pairs TTFT p90 / E2E p90 over the replicates (agentic_kvc.paired's two-level bootstrap, as the
study does):

- TraceLab x1 / x2 (2 x H20, 64k-token HBM): seeds 0-10 of the study's session jitter, HBM
  only and host 16 GiB (16 and 128 GiB give the same records there);
- Mooncake x0.1 (host 0 / 128 GiB) and x0.2 (host 0 / 16 / 128 GiB), 4 x H20: the study's
  three 600 s windows;
- agentic-long 0.05 / 0.1 sessions/s (4 x H20), host 16 GiB, seeds 0-2;
- held out (no issue names them): the `agentic-coding` preset (8 x H20, 200 sessions) at
  0.5 and 1.0 sessions/s with a 16 GiB host tier, seeds 0-4; the Mooncake trace on 8 x H20 at
  x0.4 (the x0.2 cell's load per instance on twice the fleet), host 16 GiB, three windows.

    nice -n 10 .venv/bin/python benchmarks/tiers_opening_lifetime.py \\
        --results /tmp/akvc_k2_results --out results/bench/tiers_opening_lifetime.json

`--table` prints the JSON as docs/kv_tiers/study_followups.md's table. The CLI (`--only`,
`--table`), the loop and the JSON's fields besides the figures: benchmarks/tiers_sweep.py.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.tiers import worst_peer_of_today
from agentic_kvc.config import override_item

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiers_sweep import WINDOWS, Rows, Run, Unit, cell_runs, ci_cell, per_host, study
from tiers_sweep import main as sweep
from tiers_tracelab_gap import compare

TODAY = {"name": "predicted_ttft"}
LIFETIME = {"name": "predicted_ttft", "params": {"opening": "lifetime"}}
REPLACE = {"name": "predicted_ttft", "params": {"opening": "lifetime_replace"}}
STICKY = {"name": "sticky_least_loaded"}
DYNAMO = {"name": "dynamo_kv"}


def cells() -> list[dict[str, Any]]:
    """Each: name, base, fixed settings, the replicate key and values, hosts, peers."""
    out = []
    for exp, label in (("tiers_tracelab_lo", "tracelab_x1"), ("tiers_tracelab_hi", "tracelab_x2")):
        s = study(exp)
        out.append(
            {
                "name": label,
                **s,
                "rep": ("seed", list(range(11))),
                "hosts": [0, 16],
                "peers": {"sticky_least_loaded": STICKY, "dynamo_kv": DYNAMO},
            }
        )
    for exp, label, hosts in (
        ("tiers_mooncake_lo", "mooncake_x0.1", [0, 128]),
        ("tiers_mooncake_hi", "mooncake_x0.2", [0, 16, 128]),
    ):
        out.append(
            {
                "name": label,
                **study(exp),
                "rep": ("workload.window_s", WINDOWS),
                "hosts": hosts,
                "peers": {"sticky_least_loaded": STICKY, "dynamo_kv": DYNAMO},
            }
        )
    moon8 = study("tiers_mooncake_hi")
    moon8["set"].update({"fleet.instances": 8, "workload.rate_scale": 0.4})
    out.append(
        {
            "name": "heldout_mooncake_8xH20_x0.4",
            **moon8,
            "rep": ("workload.window_s", WINDOWS),
            "hosts": [16],
            "peers": {"sticky_least_loaded": STICKY, "dynamo_kv": DYNAMO},
        }
    )
    for rate in (0.5, 1.0):
        out.append(
            {
                "name": f"heldout_agentic_{rate}",
                "base": "config/runs/sim_h20_agentic.yaml",
                "set": {"workload.generator.params.session_rate_per_s": rate},
                "rep": ("seed", list(range(5))),
                "hosts": [16],
                "peers": {"sticky_least_loaded": STICKY, "dynamo_kv": DYNAMO},
            }
        )
    for exp, label in (
        ("tiers_agentic_lo", "agentic-long_0.05"),
        ("tiers_agentic_hi", "agentic-long_0.1"),
    ):
        out.append(
            {
                "name": label,
                **study(exp),
                "rep": ("seed", [0, 1, 2]),
                "hosts": [16],
                "peers": {"sticky_least_loaded": STICKY},
            }
        )
    return out


def specs(cell: dict[str, Any], host: float) -> list[Run]:
    """(variant, replicate, overrides) of one cell and host size."""
    pols = {"today": TODAY, "lifetime": LIFETIME, "replace": REPLACE, **cell["peers"]}
    return cell_runs(cell, pols, [override_item("fleet.kv_tiers.host_gib", host)])


def openings_informed(rows: Rows) -> dict[str, int]:
    """Over today's runs: session openings (turn 0), those that come after the run's first
    later turn (before it no session has shown a gap or a later turn's work, so any load a
    lifetime term puts on an instance is its prior), and the requests in all."""
    n = informed = reqs = 0
    for lab, _rep, recs in rows:
        if lab != "today":
            continue
        first_return = min((r["arrival_s"] for r in recs if r["turn"] > 0), default=math.inf)
        opens = [r["arrival_s"] for r in recs if r["turn"] == 0]
        n += len(opens)
        informed += sum(t > first_return for t in opens)
        reqs += len(recs)
    return {"openings": n, "after_first_later_turn": informed, "requests": reqs}


def table(units: dict[str, Any]) -> str:
    """Per cell and host: each form against today's predicted_ttft, and ours and today's
    against the best peer (the peer with the lowest TTFT p90 against today's)."""
    rows = [
        "| cell | lifetime vs today | lifetime_replace vs today | best peer | "
        "lifetime vs peer | lifetime_replace vs peer | today vs peer |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, r in units.items():
        best = worst_peer_of_today(r)  # the peer today's predicted_ttft does worst against
        rows.append(
            f"| {key} | {ci_cell(r['lifetime_vs_today'])} | {ci_cell(r['replace_vs_today'])} | "
            f"{best} | {ci_cell(r[f'lifetime_vs_{best}'])} | {ci_cell(r[f'replace_vs_{best}'])} | "
            f"{ci_cell(r[f'today_vs_{best}'])} |"
        )
    return "\n".join(rows)


def analyse(unit: Unit, rows: Rows, _results: Path) -> dict[str, Any]:
    """One cell and host: the openings today's runs saw, each lifetime form against today's,
    and each form and today's against each of the cell's peers."""
    n = unit.instances
    res: dict[str, Any] = {"openings": openings_informed(rows)}
    for ours in ("lifetime", "replace"):
        res[f"{ours}_vs_today"] = compare(rows, "today", ours, n)
    for peer in unit.cell["peers"]:
        for ours in ("lifetime", "replace", "today"):
            res[f"{ours}_vs_{peer}"] = compare(rows, peer, ours, n)
    return res


def main() -> int:
    return sweep(
        "tiers_opening_lifetime",
        __doc__,
        Path("/tmp/akvc_k2_results"),
        lambda: per_host(cells(), specs),
        analyse,
        table,
    )


if __name__ == "__main__":
    raise SystemExit(main())
