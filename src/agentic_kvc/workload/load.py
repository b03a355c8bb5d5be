"""`load_workload`: the single entry point runs use to get their requests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentic_kvc.config import ConfigError, RunConfig, WorkloadConfig, load_config
from agentic_kvc.io import dumps_canonical
from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats import read_workload
from agentic_kvc.workload.generator import resolve_params, synthesize
from agentic_kvc.workload.model import Workload
from agentic_kvc.workload.stats import hit_rate_ceiling
from agentic_kvc.workload.transform import apply_transforms


def resolve_trace_path(trace: str, base_dir: Path | None = None) -> Path:
    """A relative `workload.trace` is taken from `base_dir` (the config's folder) when given."""
    path = Path(trace).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        raise WorkloadFormatError(
            path,
            "field 'workload.trace': no such file (fetch the public traces with "
            "`snakemake --cores 1 traces` or `akvc workload fetch NAME -o FILE`, or set a "
            "local path)",
        )
    return path


def check_workload_source(
    cfg: WorkloadConfig, base_dir: Path | None = None, files: bool = True
) -> None:
    """Fail early, before a run directory is made, on what can be checked without reading or
    generating the workload: a generator preset or parameter that does not validate
    (ValueError naming `workload.generator` and the field; the config's own validation leaves
    `params` to the generator) and, with `files`, a trace file that is not there
    (WorkloadFormatError). A bad trace row is found when the run reads the trace."""
    if cfg.generator is not None:
        try:
            resolve_params(cfg.generator.preset, cfg.generator.params)
        except ValueError as exc:
            raise ValueError(f"workload.generator: {exc}") from None
    if files and cfg.trace is not None:
        resolve_trace_path(cfg.trace, base_dir)


def load_workload(cfg: WorkloadConfig, seed: int, base_dir: Path | None = None) -> Workload:
    """Read the trace or run the generator, then subset and scale as `cfg` says.

    `seed` drives the generator and `session_jitter_s` (a trace without the jitter ignores it:
    `WorkloadConfig.uses_seed`). The result's meta records the source and
    every transform applied; `cfg.mode` is left to the backends, which use `arrival_s` (open
    loop) or the first turn's arrival plus `think_s` (closed loop).
    """
    if cfg.generator is not None:
        gen = cfg.generator
        try:
            workload = synthesize(gen.preset, gen.sessions, seed, gen.params)
        except ValueError as exc:
            raise ValueError(f"workload.generator: {exc}") from None
    else:
        assert cfg.trace is not None  # WorkloadConfig guarantees one source
        path = resolve_trace_path(cfg.trace, base_dir).resolve()
        st = path.stat()
        workload = _read_trace(path, st.st_size, st.st_mtime_ns, cfg.format)
    try:
        workload = apply_transforms(
            workload,
            window_s=cfg.window_s,
            max_sessions=cfg.max_sessions,
            max_requests=cfg.max_requests,
            token_scale=cfg.token_scale,
            max_input_tokens=cfg.max_input_tokens,
            session_jitter_s=cfg.session_jitter_s,
            seed=seed,
            rate_scale=cfg.rate_scale,
            time_scale=cfg.time_scale,
        )
    except ValueError as exc:  # e.g. settings that leave no request
        raise ConfigError(f"workload: {exc}") from None
    workload.meta["seed"] = seed
    return workload


@lru_cache(maxsize=2)
def _read_trace(path: Path, size: int, mtime_ns: int, fmt: str) -> Workload:
    """A trace file, parsed once per process while it is unchanged (size and mtime are in the
    key): a batch of simulated runs replays one trace under many policies and windows, and
    parsing the Mooncake trace took a third of such a run. `apply_transforms` returns a new
    `Workload` (its own session list and meta) but may keep the parsed sessions and requests;
    nothing downstream changes a session or request, so runs share them."""
    del size, mtime_ns  # the cache key only
    return read_workload(path, fmt)


def _run_config(config: RunConfig | Mapping[str, Any] | Path) -> RunConfig:
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, Path):  # a run directory, or its config.json
        path = config / "config.json" if config.is_dir() else config
        return load_config(json.loads(path.read_text()))
    return load_config(dict(config))


def _workload_key(cfg: RunConfig) -> str:
    # A trace without session jitter ignores the seed, so all its seeds share one workload.
    seed = cfg.seed if cfg.workload.uses_seed else None
    return dumps_canonical({"workload": cfg.workload.model_dump(mode="json"), "seed": seed})


@lru_cache(maxsize=8)
def _cached_workload(key: str) -> Workload:
    data = json.loads(key)
    seed = data["seed"] if data["seed"] is not None else 0
    return load_workload(WorkloadConfig.model_validate(data["workload"]), seed)


def workload_for(config: RunConfig | Mapping[str, Any] | Path) -> Workload:
    """The workload a run replays: from its RunConfig, its canonical config dict (a run's
    `config.json`), or its run directory. Cached by workload config (and seed, where the
    workload uses it), so the runs of one workload load it once; treat the result as read-only."""
    return _cached_workload(_workload_key(_run_config(config)))


@lru_cache(maxsize=64)
def _cached_ceiling(key: str, block_size: int) -> float:
    return hit_rate_ceiling(_cached_workload(key), block_size)


def hit_rate_ceiling_for(config: RunConfig | Mapping[str, Any] | Path) -> float:
    """`hit_rate_ceiling` of a run's workload at its engines' block size (fleet.block_size)."""
    cfg = _run_config(config)
    return _cached_ceiling(_workload_key(cfg), cfg.fleet.block_size)
