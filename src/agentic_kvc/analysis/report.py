"""REPORT.md: tables computed from the records of complete runs, rendered through a template.

Nothing here is copied from summary.json or typed by hand: every number comes from the
runs' requests.jsonl through `analysis.tables`, so the report always regenerates from raw
records. Benchmark files (`results/bench/*.json`, written by `benchmarks/*.py`) are shown by a
generic section: a list of flat objects becomes a table, anything else a key/value list.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2
import polars as pl

from agentic_kvc.analysis.experiments import Plan
from agentic_kvc.analysis.load import RunDir, find_runs, requests_frame
from agentic_kvc.analysis.tables import (
    latency_summary,
    route_class_summary,
    sim_vs_real,
    token_load_per_instance,
    token_load_summary,
)

MAX_BENCH_ROWS = 60


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def fmt_num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _latency_cells(row: Mapping[str, Any]) -> dict[str, str]:
    return {
        "requests": str(row["requests"]),
        "errors": str(row["errors"]),
        "ttft_p50": fmt_ms(row["ttft_s_p50"]),
        "ttft_p90": fmt_ms(row["ttft_s_p90"]),
        "ttft_p99": fmt_ms(row["ttft_s_p99"]),
        "tpot_p50": fmt_ms(row["tpot_s_p50"]),
        "tpot_p90": fmt_ms(row["tpot_s_p90"]),
        "e2e_p50": fmt_s(row["e2e_s_p50"]),
        "e2e_p99": fmt_s(row["e2e_s_p99"]),
        "hit_rate": fmt_pct(row["prefix_hit_rate"]),
    }


def run_rows(requests: pl.DataFrame) -> list[dict[str, str]]:
    """One row per run: latency percentiles, hit rate and token load max/min."""
    lat = latency_summary(requests, ["run_id", "experiment", "variant", "seed", "backend"])
    load = token_load_summary(token_load_per_instance(requests)).select(
        "run_id", "tokens_max", "tokens_min", "max_over_min"
    )
    rows = []
    for row in lat.join(load, on="run_id", how="left").sort("run_id").iter_rows(named=True):
        rows.append(
            {
                "run_id": row["run_id"],
                "experiment": row["experiment"],
                "variant": row["variant"],
                "seed": str(row["seed"]),
                "backend": row["backend"],
                **_latency_cells(row),
                "tok_max": fmt_num(row["tokens_max"]),
                "tok_min": fmt_num(row["tokens_min"]),
                "tok_ratio": fmt_num(row["max_over_min"]),
            }
        )
    return rows


def variant_rows(requests: pl.DataFrame) -> list[dict[str, str]]:
    """Seeds pooled: one row per (experiment, variant)."""
    lat = latency_summary(requests, ["experiment", "variant"])
    seeds = requests.group_by(["experiment", "variant"]).agg(pl.col("run_id").n_unique().alias("n"))
    rows = []
    joined = lat.join(seeds, on=["experiment", "variant"]).sort(["experiment", "variant"])
    for row in joined.iter_rows(named=True):
        rows.append(
            {
                "experiment": row["experiment"],
                "variant": row["variant"],
                "runs": str(row["n"]),
                **_latency_cells(row),
            }
        )
    return rows


def route_class_rows(requests: pl.DataFrame) -> list[dict[str, str]]:
    rows = []
    for row in route_class_summary(requests, ["experiment", "variant"]).iter_rows(named=True):
        rows.append(
            {
                "experiment": row["experiment"],
                "variant": row["variant"],
                "route_class": row["route_class"],
                "share": fmt_pct(row["share"]),
                **_latency_cells(row),
            }
        )
    return rows


def _signed_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def twin_rows(requests: pl.DataFrame) -> list[dict[str, str]]:
    """Real runs next to their simulated twins: `real / sim (sim error)` per statistic."""
    rows = []
    for row in sim_vs_real(requests).iter_rows(named=True):
        cells = {}
        for stat, fmt in (("ttft_s", fmt_ms), ("e2e_s", fmt_s)):
            for p in ("p50", "p90"):
                key = f"{stat}_{p}"
                cells[key] = (
                    f"{fmt(row[key])} / {fmt(row[f'{key}_sim'])} "
                    f"({_signed_pct(row[f'{key}_rel_err'])})"
                )
        diff = row["prefix_hit_rate_diff"]
        cells["hit_rate"] = (
            f"{fmt_pct(row['prefix_hit_rate'])} / {fmt_pct(row['prefix_hit_rate_sim'])} "
            f"({'-' if diff is None else f'{diff * 100:+.1f} pt'})"
        )
        rows.append(
            {
                "experiment": row["experiment"],
                "variant": row["variant"],
                "seed": str(row["seed"]),
                "run_id": row["run_id"],
                "sim_run_id": row["run_id_sim"],
                "requests": f"{row['requests']} / {row['requests_sim']}",
                "errors": f"{row['errors']} / {row['errors_sim']}",
                **cells,
            }
        )
    return rows


def _workload_text(cfg: Mapping[str, Any]) -> str:
    wl = cfg.get("workload", {})
    if wl.get("trace"):
        return f"trace {Path(wl['trace']).name} ({wl.get('mode', '?')})"
    gen = wl.get("generator") or {}
    return f"generator {gen.get('preset', '?')} x{gen.get('sessions', '?')} ({wl.get('mode', '?')})"


def provenance_rows(runs: Iterable[RunDir]) -> list[dict[str, str]]:
    rows = []
    for run in runs:
        m, cfg = run.manifest, run.config
        git = m.get("git") or {}
        commit = (git.get("commit") or "unknown")[:10]
        dirty = git.get("dirty")
        fleet = cfg.get("fleet", {})
        rows.append(
            {
                "run_id": run.run_id,
                "source": run.source,
                "commit": commit + (" (dirty)" if dirty else "" if dirty is False else " (?)"),
                "backend": str(m.get("backend", cfg.get("backend", "?"))),
                "policy": str(cfg.get("policy", {}).get("name", "?")),
                "seed": str(m.get("seed", cfg.get("seed", "?"))),
                "fleet": f"{fleet.get('instances', '?')} x {fleet.get('model', '?')} "
                f"on {fleet.get('hardware', '?')}",
                "workload": _workload_text(cfg),
                "started": str(m.get("started_at", "?")),
                "wall_s": fmt_num(m.get("wall_s")),
            }
        )
    return rows


# Flags that differ between instances of one fleet by construction (their addresses).
_PER_INSTANCE_FLAGS = ("--host", "--port")


def _engine_flags(argv: list[str]) -> str:
    """The engine's command-line flags (from the first `--flag`), without the launcher part
    and the per-instance address, so a fleet started alike shows one flag set."""
    start = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    out: list[str] = []
    skip = False
    for arg in argv[start:]:
        if skip:
            skip = False
        elif arg in _PER_INSTANCE_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{f}=" for f in _PER_INSTANCE_FLAGS)):
            out.append(arg)
    return " ".join(out)


def real_run_rows(runs: Iterable[RunDir]) -> list[dict[str, str]]:
    """What explains a real-engine run: engine build, device, flags, startup time, logs.

    Read from the manifest's `backend_info` (written by `serve.backend.run_vllm`); runs of other
    backends have none and are skipped.
    """
    rows = []
    for run in runs:
        info = run.manifest.get("backend_info") or {}
        fleet = info.get("fleet")
        if not isinstance(fleet, Mapping):
            continue
        vllm = fleet.get("vllm") or {}
        instances = fleet.get("instances") or []
        startups = [i["startup_s"] for i in instances if i.get("startup_s") is not None]
        flag_sets = list(dict.fromkeys(_engine_flags(i.get("argv") or []) for i in instances))
        rows.append(
            {
                "run_id": run.run_id,
                "engine": f"{vllm.get('distribution', '?')} {vllm.get('version', '?')}",
                "device": str(fleet.get("device", "?")),
                "instances": str(len(instances)),
                "startup_s": ", ".join(fmt_num(float(s)) for s in startups) or "-",
                "replay_s": fmt_num((info.get("replay") or {}).get("wall_s")),
                "flags": " / ".join(f"`{f}`" for f in flag_sets if f) or "-",
            }
        )
    return rows


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    if isinstance(obj, list) and not obj:
        return {prefix.rstrip("."): "[]"}
    if isinstance(obj, list) and not all(isinstance(v, Mapping) for v in obj):
        return {prefix.rstrip("."): ", ".join(fmt_num(v) for v in obj[:16])}
    if isinstance(obj, list):
        return {prefix.rstrip("."): f"[{len(obj)} rows]"}
    return {prefix.rstrip("."): fmt_num(obj)}


def _table(title: str, rows: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """Rows of (name or None, mapping) as a table: one column per flattened leaf."""
    flat = [({"name": name} if name is not None else {}) | _flat(r) for name, r in rows]
    columns = list(dict.fromkeys(k for r in flat[:MAX_BENCH_ROWS] for k in r))
    return {
        "title": title,
        "columns": columns,
        "rows": [[r.get(c, "") for c in columns] for r in flat[:MAX_BENCH_ROWS]],
        "truncated": max(len(rows) - MAX_BENCH_ROWS, 0),
    }


def _is_table(obj: Any) -> bool:
    """A list of objects, or an object of (two or more) objects: results one row each."""
    if isinstance(obj, list):
        return bool(obj) and all(isinstance(v, Mapping) for v in obj)
    return (
        isinstance(obj, Mapping)
        and len(obj) > 1
        and all(isinstance(v, Mapping) for v in obj.values())
    )


def _split(obj: Mapping[str, Any], prefix: str, meta: dict[str, Any], tables: list) -> None:
    """Walk a benchmark's JSON: collections of results become tables, other values `meta`."""
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if _is_table(value):
            items = (
                [(None, v) for v in value]
                if isinstance(value, list)
                else [(str(k), v) for k, v in value.items()]
            )
            tables.append(_table(path, items))
        elif isinstance(value, Mapping):
            _split(value, f"{path}.", meta, tables)
        else:
            meta.update(_flat(value, f"{path}."))


def bench_sections(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Each benchmark file, whatever its layout: every list of result objects (or object of
    named result objects) anywhere in it becomes a table, every other value a `key: value`
    line. Unreadable files are listed with the reason, not fatal."""
    out = []
    for path in sorted(paths):
        section: dict[str, Any] = {
            "name": path.stem,
            "path": str(path),
            "error": None,
            "meta": {},
            "tables": [],
        }
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            section["error"] = f"unreadable: {exc}"
        else:
            _split(
                {"": data} if not isinstance(data, Mapping) else data,
                "",
                section["meta"],
                section["tables"],
            )
        out.append(section)
    return out


def figure_paths(results: Path, relative_to: Path) -> list[str]:
    figs = sorted((results / "figures").glob("*/*.png"))
    out = []
    for f in figs:
        try:
            out.append(str(f.resolve().relative_to(relative_to.resolve())))
        except ValueError:
            out.append(str(f))
    return out


def build_context(
    results: Path, archive: Path | None, plan: Plan | None, report_dir: Path
) -> dict[str, Any]:
    run_ids = plan.run_ids() if plan is not None else None
    runs = find_runs(results, archive, run_ids)
    requests = requests_frame(runs, plan)
    found = {r.run_id for r in runs}
    missing = [r for r in (run_ids or []) if r not in found]
    return {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "n_runs": len(runs),
        "n_archived": sum(r.source == "archive" for r in runs),
        "n_requests": requests.height,
        "missing": missing,
        "experiments": sorted({r.experiment for r in plan.runs}) if plan else [],
        "runs": run_rows(requests) if requests.height else [],
        "variants": variant_rows(requests) if requests.height else [],
        "route_classes": route_class_rows(requests) if requests.height else [],
        "twins": twin_rows(requests) if requests.height else [],
        "provenance": provenance_rows(runs),
        "real_runs": real_run_rows(runs),
        "bench": bench_sections((results / "bench").glob("*.json")),
        "figures": figure_paths(results, report_dir),
    }


def render(template: Path, context: Mapping[str, Any]) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template.parent)),
        undefined=jinja2.StrictUndefined,  # a misspelt field fails loudly, not as a blank cell
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Markdown, not HTML
    )
    return env.get_template(template.name).render(**context)
