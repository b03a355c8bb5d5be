"""`load_workload`: the single entry point runs use to get their requests."""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.config import WorkloadConfig
from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats import read_workload
from agentic_kvc.workload.generator import synthesize
from agentic_kvc.workload.model import Workload
from agentic_kvc.workload.transform import apply_transforms


def resolve_trace_path(trace: str, base_dir: Path | None = None) -> Path:
    """A relative `workload.trace` is taken from `base_dir` (the config's folder) when given."""
    path = Path(trace).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        raise WorkloadFormatError(
            path,
            "field 'workload.trace': no such file (fetch public traces with "
            "`snakemake fetch_traces` or set a local path)",
        )
    return path


def load_workload(cfg: WorkloadConfig, seed: int, base_dir: Path | None = None) -> Workload:
    """Read the trace or run the generator, then subset and scale as `cfg` says.

    `seed` drives the generator (traces ignore it). The result's meta records the source and
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
        workload = read_workload(resolve_trace_path(cfg.trace, base_dir), cfg.format)
    workload = apply_transforms(
        workload,
        window_s=cfg.window_s,
        max_sessions=cfg.max_sessions,
        max_requests=cfg.max_requests,
        token_scale=cfg.token_scale,
        max_input_tokens=cfg.max_input_tokens,
        rate_scale=cfg.rate_scale,
        time_scale=cfg.time_scale,
    )
    workload.meta["seed"] = seed
    return workload
