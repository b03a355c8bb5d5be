"""Complete runs into polars frames: the only way notebooks and the report read results.

Runs come from two places: `results/runs/` (made by this checkout's pipeline) and the archive
(`results/archive/`, raw run directories kept for readers without the hardware that made them,
e.g. GPU fleets). Both hold the same run-directory layout, and only complete ones are read
(`runs.is_complete`). When a run_id is in both, the fresh one wins.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.analysis.experiments import Plan, PlannedRun
from agentic_kvc.io import dumps_canonical, read_jsonl
from agentic_kvc.runs import complete_runs, is_complete


@dataclass(slots=True, frozen=True)
class RunDir:
    run_id: str
    path: Path
    source: str  # "runs" or "archive"
    manifest: dict[str, Any]

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest.get("config", {})


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path / 'manifest.json'}: unreadable manifest: {exc}") from exc


def find_runs(
    results: Path, archive: Path | None = None, run_ids: Iterable[str] | None = None
) -> list[RunDir]:
    """Complete run directories, fresh ones first then archived; filtered to `run_ids` if given.

    The result is sorted by run_id so tables do not depend on directory listing order.
    """
    found: dict[str, RunDir] = {}
    for path in complete_runs(results):
        found[path.name] = RunDir(path.name, path, "runs", _read_manifest(path))
    if archive is not None and archive.is_dir():
        for path in sorted(p for p in archive.iterdir() if p.is_dir()):
            if path.name not in found and is_complete(path):
                found[path.name] = RunDir(path.name, path, "archive", _read_manifest(path))
    if run_ids is not None:
        wanted = set(run_ids)
        found = {k: v for k, v in found.items() if k in wanted}
    return [found[k] for k in sorted(found)]


# Record fields the analysis uses, with the types polars should give them. Records may carry
# more (scores, inter-token latencies); they are not needed for the tables.
REQUEST_SCHEMA: dict[str, Any] = {
    "request_id": pl.String,
    "session_id": pl.String,
    "turn": pl.Int64,
    "arrival_s": pl.Float64,
    "input_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "predicted_cached_tokens": pl.Int64,
    "policy": pl.String,
    "route_class": pl.String,
    "reason": pl.String,
    "prefill_instance": pl.Int64,
    "decode_instance": pl.Int64,
    "t_proxy_recv": pl.Float64,
    "t_prefill_done": pl.Float64,
    "t_first_token": pl.Float64,
    "t_done": pl.Float64,
    "ttft_s": pl.Float64,
    "tpot_s": pl.Float64,
    "e2e_s": pl.Float64,
    "kv_transfer_tokens": pl.Int64,
    "kv_transfer_s": pl.Float64,
    # KV tiers below HBM (issue 29): absent (null) in runs without tiers.
    "host_tokens": pl.Int64,
    "disk_tokens": pl.Int64,
    "reload_wait_s": pl.Float64,
    # Real runs whose exact view knows tiers (issue 30): the host / disk tokens it expected.
    "predicted_host_tokens": pl.Int64,
    "predicted_disk_tokens": pl.Int64,
    "error": pl.String,
}

SAMPLE_SCHEMA: dict[str, Any] = {
    "t": pl.Float64,
    "instance": pl.Int64,
    "running": pl.Float64,
    "waiting": pl.Float64,
    "kv_usage": pl.Float64,
    "prefix_cache_queries": pl.Float64,
    "prefix_cache_hits": pl.Float64,
    "router_inflight": pl.Float64,
    "router_pending_prefill_tokens": pl.Float64,
    "healthy": pl.Boolean,
    # Real engines with a tier (issue 30): their counters of prompt tokens served from it.
    "host_cached_tokens": pl.Float64,
    "disk_cached_tokens": pl.Float64,
}

# Columns describing the run each row came from (added to every frame).
RUN_COLUMNS = (
    "run_id",
    "experiment",
    "variant",
    "backend",
    "policy",
    "seed",
    "instances",
    "twin_key",
)
# Placeholder labels that give an empty frame the same columns and types as a full one.
_NO_RUN: dict[str, Any] = {**dict.fromkeys(RUN_COLUMNS, ""), "seed": 0, "instances": 0}


def twin_key(config: dict[str, Any]) -> str:
    """The run's resolved config without its backend and repeat index, hashed: a simulated
    run and a real one with equal keys ran the same workload, fleet, policy and seed (twins to
    compare; every repeat of a real run has the one simulated twin)."""
    rest = {k: v for k, v in config.items() if k not in ("backend", "repeat")}
    return hashlib.sha256(dumps_canonical(rest).encode()).hexdigest()[:12]


def variant_of(policy: str, labels: dict[str, Any]) -> str:
    """What a comparison row is called: the policy plus any matrix values other than seed,
    repeat and policy (e.g. `lmetric fleet.instances=8`); seeds and repeats of one variant are
    pooled. A `policy` matrix entry (a whole mapping) is named by the plan's variant."""
    skip = ("seed", "repeat", "policy.name", "policy")
    extra = [f"{k}={v}" for k, v in labels.items() if k not in skip]
    return " ".join([policy, *extra])


def run_labels(run: RunDir, plan: Plan | None) -> dict[str, Any]:
    planned = None
    if plan is not None:
        planned = next((r for r in plan.runs if r.run_id == run.run_id), None)
    return labels_of(run, planned)


def labels_of(run: RunDir, planned: PlannedRun | None) -> dict[str, Any]:
    """The labels of `run` as `planned` (one experiment's entry for it) names it."""
    cfg = run.config
    policy = str(cfg.get("policy", {}).get("name", "?"))
    labels = planned.labels if planned is not None else {}
    name = planned.variant if planned is not None and planned.variant else policy
    return {
        "run_id": run.run_id,
        "experiment": planned.experiment if planned is not None else "(unplanned)",
        "variant": variant_of(name, labels),
        "backend": str(cfg.get("backend", run.manifest.get("backend", "?"))),
        "policy": policy,
        "seed": int(cfg.get("seed", run.manifest.get("seed", 0))),
        "instances": int(cfg.get("fleet", {}).get("instances", 0)),
        "twin_key": twin_key(cfg),
    }


def _frame(rows: list[dict[str, Any]], schema: dict[str, Any], where: Path) -> pl.DataFrame:
    picked = [{k: r.get(k) for k in schema} for r in rows]
    try:
        return pl.DataFrame(picked, schema=schema, orient="row" if not picked else None)
    except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
        raise ValueError(f"{where}: records do not match the record schema: {exc}") from exc


def records_frame(path: Path, schema: dict[str, Any]) -> pl.DataFrame:
    """One JSONL file of records (requests or instance samples) typed by `schema`.

    polars' reader is ~6x faster than json.loads per line (a report reads ~10^5 records per
    notebook); when it refuses a file, the line-by-line reader says which line is bad.
    """
    try:
        return pl.read_ndjson(path, schema=schema)
    except (OSError, pl.exceptions.PolarsError, ValueError):
        return _frame(list(read_jsonl(path)), schema, path)


def _with_run(df: pl.DataFrame, labels: dict[str, Any]) -> pl.DataFrame:
    return df.with_columns(
        pl.lit(labels["run_id"], pl.String).alias("run_id"),
        pl.lit(labels["experiment"], pl.String).alias("experiment"),
        pl.lit(labels["variant"], pl.String).alias("variant"),
        pl.lit(labels["backend"], pl.String).alias("backend"),
        pl.lit(labels["policy"], pl.String).alias("policy"),
        pl.lit(labels["seed"], pl.Int64).alias("seed"),
        pl.lit(labels["instances"], pl.Int64).alias("instances"),
        pl.lit(labels["twin_key"], pl.String).alias("twin_key"),
    )


def _runs_frame(
    runs: Iterable[RunDir], plan: Plan | None, file: str, schema: dict[str, Any]
) -> pl.DataFrame:
    """One row per line of each run's `file`, typed by `schema`, with the run's labels."""
    frames = []
    for run in runs:
        rows = records_frame(run.path / file, schema)
        frames.append(_with_run(rows, run_labels(run, plan)))
    if not frames:
        return _with_run(_frame([], schema, Path("-")), _NO_RUN).clear()
    return pl.concat(frames, how="vertical")


def requests_frame(runs: Iterable[RunDir], plan: Plan | None = None) -> pl.DataFrame:
    """Every request record of `runs`, one row each, with the run's labels.

    `policy` is the run's configured policy (a record's own `policy` field may be empty for
    backends that leave it to the run).
    """
    return _runs_frame(runs, plan, "requests.jsonl", REQUEST_SCHEMA)


def samples_frame(runs: Iterable[RunDir], plan: Plan | None = None) -> pl.DataFrame:
    """Every per-instance sample of `runs`, with the run's labels."""
    return _runs_frame(runs, plan, "instances.jsonl", SAMPLE_SCHEMA)


def open_runs(
    results_dir: str | Path, archive_dir: str | Path | None = None, plan_path: str | Path = ""
) -> tuple[list[RunDir], Plan | None]:
    """What a notebook's parameters name: the planned runs (every complete run if no plan)."""
    from agentic_kvc.analysis.experiments import read_plan

    plan = read_plan(plan_path) if plan_path else None
    runs = find_runs(
        Path(results_dir),
        Path(archive_dir) if archive_dir else None,
        plan.run_ids() if plan is not None else None,
    )
    return runs, plan
