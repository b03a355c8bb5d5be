"""A run directory as the instruments read it: its config (with overrides), workload and
engine profile, and a check that re-simulating it reproduces its records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.io import dumps_canonical
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload
from agentic_kvc.workload.model import Workload


class RunDirError(ValueError):
    """A folder that is not a readable run directory."""


@dataclass(slots=True)
class RunInput:
    run_dir: Path
    config: RunConfig
    workload: Workload
    profile: EngineProfile
    simulated: bool  # a simulated run, config unchanged: its records can be checked
    real: bool  # the run was on real engines (re-simulated here)


def load_run(run_dir: Path, overrides: list[str] | None = None) -> RunInput:
    """The run's config (plus `--set` overrides), as a simulated run of the same fleet.

    RunDirError (a ValueError) if `run_dir` is not a run directory or its config.json cannot be
    read; ConfigError and WorkloadFormatError (ValueErrors too) name the field or trace row."""
    path = run_dir / "config.json"
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no config.json (not a run directory)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunDirError(f"{path}: cannot read it as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a JSON object")
    real = data.get("backend", "sim") != "sim"
    simulated = not real and not overrides
    data["backend"] = "sim"  # a real run's config re-simulated: same workload and fleet
    config = load_config(data, overrides or [], name=str(path))
    return RunInput(
        run_dir,
        config,
        load_workload(config.workload, config.seed),
        profile_for(config),
        simulated,
        real,
    )


def records_bytes(records: list[RequestRecord]) -> bytes:
    """requests.jsonl as the sim backend writes it (same order, same serialization)."""
    rows = sorted(records, key=lambda r: (r.arrival_s, r.session_id, r.turn))
    return "".join(dumps_canonical(r.to_dict()) + "\n" for r in rows).encode()


def same_records(run: RunInput, records: list[RequestRecord]) -> bool | None:
    """Whether `records` are byte for byte the run's requests.jsonl (None: not comparable)."""
    path = run.run_dir / "requests.jsonl"
    if not run.simulated or not path.is_file():
        return None
    return path.read_bytes() == records_bytes(records)
