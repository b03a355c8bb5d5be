"""A run directory as the instruments read it: its config (with overrides), workload and
engine profile, and a check that re-simulating it reproduces its records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.io import dumps_canonical
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload
from agentic_kvc.workload.model import Workload


@dataclass(slots=True)
class RunInput:
    run_dir: Path
    config: RunConfig
    workload: Workload
    profile: EngineProfile
    simulated: bool  # a simulated run, config unchanged: its records can be checked
    real: bool  # the run was on real engines (re-simulated here)


def load_run(run_dir: Path, overrides: list[str] | None = None) -> RunInput:
    """The run's config (plus `--set` overrides), as a simulated run of the same fleet."""
    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no config.json (not a run directory)")
    data: dict[str, Any] = json.loads(path.read_text())
    real = data.get("backend", "sim") != "sim"
    simulated = not real and not overrides
    data["backend"] = "sim"  # a real run's config re-simulated: same workload and fleet
    config = load_config(data, overrides or [])
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
