"""The sweep the KV-tier benchmarks share: their CLI, their loop over cells and their JSON.

benchmarks/tiers_opening_lifetime.py, tiers_opening_near_tie.py, tiers_online_cost.py and
tiers_link_misspec.py each compare variants of predicted_ttft with peers on cells of the tiers
study (docs/kv_tiers.md). They differ in their variants, what they compute per cell and their
table; what they share is here, in one place:

- the CLI: `--results` (the scratch results folder `akvc run-batch` writes into), `--out`,
  `--only` (cells whose name contains a string), `--table` (print `--out` as the docs' table);
- the loop (`main`): per unit (a cell, or a cell and a tier setup), its runs through one
  `akvc run-batch` process (`run_specs`: runs already in the results folder are skipped, the
  run id being the config's hash), then the benchmark's own analysis of their records, and
  the JSON rewritten after every unit, so a sweep cut short keeps what it finished;
- what every such JSON says besides its numbers: `benchmark`, `machine` (`machine()`: the
  host's facts and the git commit) and `command`, and per unit its batch's wall and CPU
  seconds, when it started and the 1-minute load average before and after.

Two layouts, each the one its readers (analysis/bench_summary/tiers.py, analysis/headlines.py)
already take: "flat" (the units at the top level beside the three fields above, keys sorted:
tiers_opening_*, tiers_online_cost) and "cells" (the units under `cells`, in sweep order, with
top-level figures from a `headline` function: tiers_link_misspec).

Also here: the tiers study's cell settings (`study`, `WINDOWS`), its pooled summary of a
label's runs (`pooled`) and the paired comparison's table text (`ci_cell`), which those
benchmarks' cells and tables are built from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl
import yaml

from agentic_kvc.analysis.studies import tiers
from agentic_kvc.config import load_config, override_item
from agentic_kvc.runs import timing_conditions

REPO = Path(__file__).resolve().parent.parent
WINDOWS = [[0, 600], [600, 1200], [1200, 1800]]  # the Mooncake cells' three 600 s windows
META = ("benchmark", "machine", "command")  # the top-level fields that are not units

Run = tuple[str, Any, list[str]]  # (variant label, replicate, overrides)
Rows = list[tuple[str, Any, list[dict[str, Any]]]]  # (variant label, replicate, records)


def study(name: str) -> dict[str, Any]:
    """The base config and fixed settings of one experiment of config/config.yaml."""
    exps = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    exp = next(e for e in exps if e["name"] == name)
    return {"base": exp["base"], "set": dict(exp.get("set") or {})}


def cell_runs(cell: Mapping[str, Any], pols: Mapping[str, Any], tier: list[str]) -> list[Run]:
    """A cell's runs: per replicate (`cell["rep"]`: the key and its values) and variant
    (label -> policy spec of `pols`), the cell's fixed settings, the replicate, the policy and
    the tier setup's overrides `tier`."""
    key, reps = cell["rep"]
    out = []
    for rep in reps:
        for lab, pol in pols.items():
            sets = [override_item(k, v) for k, v in cell["set"].items()]
            sets += [override_item(key, rep), override_item("policy", pol), *tier]
            out.append((lab, json.dumps(rep), sets))
    return out


def ci_cell(r: Mapping[str, Any]) -> str:
    """A comparison's TTFT p90 / E2E p90 ({rel, ci}) as the docs' tables print them."""

    def one(m: Mapping[str, Any]) -> str:
        lo, hi = m["ci"]
        txt = f"{100 * m['rel']:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        return txt + (" n.s." if lo <= 0 <= hi else "")

    return f"{one(r['ttft_p90'])} / {one(r['e2e_p90'])}"


def machine() -> dict[str, Any]:
    """Where a benchmark ran: the host's facts (runs.timing_conditions), the
    checkout's commit, and whether the code and configs that decide the numbers (src/,
    benchmarks/, config/) had uncommitted changes then (the commit alone would not say it)."""

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True).stdout

    dirty = git(
        "status", "--porcelain", "--untracked-files=no", "--", "src", "benchmarks", "config"
    )
    return {
        **timing_conditions(),
        "git": git("rev-parse", "--short", "HEAD").strip(),
        "git_dirty": bool(dirty.strip()),
    }


def command() -> str:
    """The command line that ran this process (the interpreter's name, then its argv)."""
    return " ".join([Path(sys.executable).name, *sys.argv])


def stamp(name: str) -> dict[str, Any]:
    """The top-level fields every benchmark JSON carries: `benchmark`, `machine`, `command`."""
    return {"benchmark": name, "machine": machine(), "command": command()}


def pooled(rows: Rows, label: str) -> dict[str, Any]:
    """The tiers study's summary (`tiers.pooled_summary`) of one label's runs, pooled over
    their replicates."""
    cols = ("error", "ttft_s", "e2e_s", "reload_wait_s", "input_tokens", "cached_tokens")
    cols += ("host_tokens", "disk_tokens")
    recs = [{c: r.get(c) for c in cols} for lab, _rep, rs in rows if lab == label for r in rs]
    schema = {c: pl.Float64 for c in cols} | {"error": pl.Utf8}
    return tiers.pooled_summary(pl.DataFrame(recs, schema=schema))


def records(results: Path, base: str, sets: list[str]) -> list[dict[str, Any]]:
    """One run's request records, found by its run id (the config's hash) in `results`."""
    rid = load_config(REPO / base, sets).run_id()
    path = results / "runs" / rid / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_specs(results: Path, base: str, runs: list[Run]) -> tuple[Rows, float, float]:
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


@dataclass(frozen=True)
class Unit:
    """What one `akvc run-batch` call runs and one JSON entry reports: `key` (the entry's
    name), the cell it belongs to (name, base, set, ...), its runs, and the tier setup (a
    host size in GiB or a named setup; None when the cell's own settings fix it)."""

    key: str
    cell: dict[str, Any]
    runs: list[Run]
    host: float | str | None = None

    @property
    def instances(self) -> int:
        """The cell's fleet size (the config's default, 8, unless the cell sets it)."""
        return int(self.cell["set"].get("fleet.instances", 8))


def host_key(name: str, host: float | str) -> str:
    """A unit's key: the cell's name and the tier setup (a GiB size written as `%g`)."""
    return f"{name}/host_{host if isinstance(host, str) else format(host, 'g')}"


def per_host(
    cells: Iterable[dict[str, Any]], specs: Callable[[dict[str, Any], Any], list[Run]]
) -> Iterable[Unit]:
    """One unit per cell and tier setup of its `hosts`, its runs from `specs(cell, host)`."""
    for cell in cells:
        for host in cell["hosts"]:
            yield Unit(host_key(cell["name"], host), cell, specs(cell, host), host)


def units_of(report: Mapping[str, Any], layout: Literal["flat", "cells"]) -> dict[str, Any]:
    """A report's units: its top-level entries but `META` ("flat") or its `cells` ("cells")."""
    if layout == "cells":
        return dict(report.get("cells", {}))
    return {k: v for k, v in report.items() if k not in META}


def parser(description: str, results: Path, out: Path) -> argparse.ArgumentParser:
    """The sweep's CLI, with this benchmark's default results folder and output file."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--results", type=Path, default=results)
    ap.add_argument("--out", type=Path, default=out)
    ap.add_argument("--only", default="", help="only cells whose name contains this")
    ap.add_argument("--table", action="store_true", help="print --out as the docs' table(s)")
    return ap


def main(
    name: str,
    doc: str,
    results: Path,
    units: Callable[[], Iterable[Unit]],
    analyse: Callable[[Unit, Rows, Path], dict[str, Any]],
    table: Callable[[dict[str, Any]], str],
    *,
    layout: Literal["flat", "cells"] = "flat",
    headline: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    quiet: tuple[str, ...] = (),
) -> int:
    """The benchmark `name`'s command line: `--table` prints `table(units)` of `--out`;
    otherwise, per unit of `units()` whose cell name contains `--only`, its runs through
    `run_specs`, then `analyse(unit, rows, results folder)` (the benchmark's own figures),
    with the batch's seconds, start and load added, kept under the unit's key (an earlier
    file's other units kept) and printed (less the `quiet` fields), the file rewritten each
    time; with `headline`, its figures over the units are the report's top-level ones."""
    out_default = REPO / f"results/bench/{name}.json"
    args = parser(doc.split("\n")[0], results, out_default).parse_args()
    if args.table:
        print(table(units_of(json.loads(args.out.read_text()), layout)))
        return 0
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    if layout == "cells":
        report.setdefault("cells", {})
    report.update(stamp(name))
    for unit in units():
        if args.only not in unit.cell["name"]:
            continue
        started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        load0 = os.getloadavg()[0]
        rows, wall, cpu = run_specs(args.results, unit.cell["base"], unit.runs)
        # this invocation's batch: runs already in the results folder are skipped
        res: dict[str, Any] = {
            "runs": len(unit.runs),
            "batch_wall_s": round(wall, 1),
            "batch_cpu_s": round(cpu, 1),
        }
        res.update(analyse(unit, rows, args.results))
        res["started"] = started
        res["load_avg_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        if layout == "cells":
            report["cells"][unit.key] = res
        else:
            report[unit.key] = res
        if headline is not None:
            report.update(headline(report))
        print(unit.key, json.dumps({k: v for k, v in res.items() if k not in quiet}), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, sort_keys=layout == "flat") + "\n")
    return 0
