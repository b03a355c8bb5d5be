"""predicted_ttft with `opening: lifetime` against today's and the best peer (issue 29 goal 2).

docs/kv_tiers.md, TraceLab part, section 7. A request that opens a session fixes where its
later turns run; `opening: lifetime` (policy/session_load.py) prices such a request's wait and
decode on each candidate by the stationary load the sessions homed there bring back (M/G/1
wait, Little's-law decode concurrency) instead of the instance's state at this instant. This
runs it on every cell of the tiers study and on workloads no issue names, beside today's
predicted_ttft and the best peer, through `akvc run-batch` into a scratch results folder (one
process, one cell at a time), and pairs TTFT p90 / E2E p90 over the replicates
(agentic_kvc.paired's two-level bootstrap, as the study does):

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

`--table` prints the JSON as docs/kv_tiers.md's table. `--only` restricts to cells whose
name contains a string. Runs already in the results folder
are skipped by run-batch (the run id is the config's hash).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from agentic_kvc.analysis.bench_summary import online_best_peer
from agentic_kvc.analysis.experiments import override_item
from agentic_kvc.config import load_config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from tiers_tracelab_gap import compare  # noqa: E402

TODAY = {"name": "predicted_ttft"}
LIFETIME = {"name": "predicted_ttft", "params": {"opening": "lifetime"}}
REPLACE = {"name": "predicted_ttft", "params": {"opening": "lifetime_replace"}}
STICKY = {"name": "sticky_least_loaded"}
DYNAMO = {"name": "dynamo_kv"}
WINDOWS = [[0, 600], [600, 1200], [1200, 1800]]


def _study(name: str) -> dict[str, Any]:
    exps = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    exp = next(e for e in exps if e["name"] == name)
    return {"base": exp["base"], "set": dict(exp.get("set") or {})}


def cells() -> list[dict[str, Any]]:
    """Each: name, base, fixed settings, the replicate key and values, hosts, peers."""
    out = []
    for exp, label in (("tiers_tracelab_lo", "tracelab_x1"), ("tiers_tracelab_hi", "tracelab_x2")):
        s = _study(exp)
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
                **_study(exp),
                "rep": ("workload.window_s", WINDOWS),
                "hosts": hosts,
                "peers": {"sticky_least_loaded": STICKY, "dynamo_kv": DYNAMO},
            }
        )
    moon8 = _study("tiers_mooncake_hi")
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
                **_study(exp),
                "rep": ("seed", [0, 1, 2]),
                "hosts": [16],
                "peers": {"sticky_least_loaded": STICKY},
            }
        )
    return out


def specs(cell: dict[str, Any], host: float) -> list[tuple[str, Any, list[str]]]:
    """(variant, replicate, overrides) of one cell and host size."""
    key, reps = cell["rep"]
    pols = {"today": TODAY, "lifetime": LIFETIME, "replace": REPLACE, **cell["peers"]}
    out = []
    for rep in reps:
        for lab, pol in pols.items():
            sets = [override_item(k, v) for k, v in cell["set"].items()]
            sets += [
                override_item(key, rep),
                override_item("policy", pol),
                override_item("fleet.kv_tiers.host_gib", host),
            ]
            out.append((lab, json.dumps(rep), sets))
    return out


def openings_informed(rows: list[tuple[str, Any, list[dict[str, Any]]]]) -> dict[str, int]:
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


def records(results: Path, base: str, sets: list[str]) -> list[dict[str, Any]]:
    rid = load_config(REPO / base, sets).run_id()
    path = results / "runs" / rid / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_specs(
    results: Path, base: str, runs: list[tuple[str, Any, list[str]]]
) -> tuple[list[tuple[str, Any, list[dict[str, Any]]]], float, float]:
    """One cell's runs (label, replicate, sets) through one `akvc run-batch` process (runs
    already in `results` are skipped), then their records: (label, replicate, records) per
    run, and the batch's wall and CPU seconds. A failed batch stops with its stderr's tail."""
    argv = [json.dumps([base, *sets]) for _lab, _rep, sets in runs]
    t0, c0 = time.time(), _children_cpu()
    proc = subprocess.run(
        [str(REPO / ".venv/bin/akvc"), "run-batch", "--results", str(results), *argv],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(proc.returncode)
    wall, cpu = time.time() - t0, _children_cpu() - c0
    return [(lab, rep, records(results, base, sets)) for lab, rep, sets in runs], wall, cpu


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _cell(r: dict[str, Any]) -> str:
    t, e = r["ttft_p90"], r["e2e_p90"]

    def one(m: dict[str, Any]) -> str:
        lo, hi = m["ci"]
        txt = f"{100 * m['rel']:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        return txt + (" n.s." if lo <= 0 <= hi else "")

    return f"{one(t)} / {one(e)}"


def table(report: dict[str, Any]) -> str:
    """Per cell and host: each form against today's predicted_ttft, and ours and today's
    against the best peer (the peer with the lowest TTFT p90 against today's)."""
    rows = [
        "| cell | lifetime vs today | lifetime_replace vs today | best peer | "
        "lifetime vs peer | lifetime_replace vs peer | today vs peer |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, r in report.items():
        best = online_best_peer(r)  # the peer today's predicted_ttft does worst against
        rows.append(
            f"| {key} | {_cell(r['lifetime_vs_today'])} | {_cell(r['replace_vs_today'])} | "
            f"{best} | {_cell(r[f'lifetime_vs_{best}'])} | {_cell(r[f'replace_vs_{best}'])} | "
            f"{_cell(r[f'today_vs_{best}'])} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=Path("/tmp/akvc_k2_results"))
    ap.add_argument("--out", type=Path, default=REPO / "results/bench/tiers_opening_lifetime.json")
    ap.add_argument("--only", default="", help="only cells whose name contains this")
    ap.add_argument("--table", action="store_true", help="print --out as a markdown table")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return 0
    report: dict[str, Any] = {}
    if args.out.exists():
        report = json.loads(args.out.read_text())
    for cell in cells():
        if args.only not in cell["name"]:
            continue
        for host in cell["hosts"]:
            runs = specs(cell, host)
            rows, wall, _cpu = run_specs(args.results, cell["base"], runs)
            n = int(cell["set"].get("fleet.instances", 8))
            # this invocation's batch time: runs already in the results folder are skipped
            res: dict[str, Any] = {"runs": len(runs), "batch_wall_s": round(wall, 1)}
            res["openings"] = openings_informed(rows)
            for ours in ("lifetime", "replace"):
                res[f"{ours}_vs_today"] = compare(rows, "today", ours, n)
            for peer in cell["peers"]:
                for ours in ("lifetime", "replace", "today"):
                    res[f"{ours}_vs_{peer}"] = compare(rows, peer, ours, n)
            key = f"{cell['name']}/host_{host:g}"
            report[key] = res
            print(key, json.dumps(res), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
