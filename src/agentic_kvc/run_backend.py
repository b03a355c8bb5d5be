"""The run-backend contract: what `akvc run` asks of a simulated or a real fleet.

A run backend (the config's `backend:`, `sim` or `vllm`) is a callable
`(config, run_dir) -> BackendResult`: it produces the run's request records and instance samples
(and facts for the manifest); `runs.execute` writes them into the run directory. Run backends
(`sim/run_backend.py`, `serve/run_backend.py`) import this module, never `runs`, and `runs`
finds them by name through `backend_for` (imported only when asked for: the real one needs
aiohttp and vLLM's launcher, the simulated one numpy), so neither side imports the other.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentic_kvc.config import RunConfig
    from agentic_kvc.workload.model import Workload


@dataclass(slots=True)
class BackendResult:
    records: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    extra: dict[str, Any]  # backend facts for the manifest (server flags, versions, timings)


class Backend(Protocol):
    def __call__(self, config: RunConfig, run_dir: Path, /) -> BackendResult: ...


# `backend:` value -> "module:function" of its implementation.
BACKENDS = {
    "sim": "agentic_kvc.sim.run_backend:run_sim",
    "vllm": "agentic_kvc.serve.run_backend:run_vllm",
}


def backend_for(name: str) -> Backend:
    try:
        module, func = BACKENDS[name].split(":")
    except KeyError:
        raise ValueError(f"field 'backend': unknown backend {name!r}") from None
    backend: Backend = getattr(importlib.import_module(module), func)
    return backend


def workload_facts(workload: Workload) -> dict[str, Any]:
    """The manifest's `backend_info.workload`: what was replayed or simulated."""
    return {"sessions": len(workload.sessions), "requests": len(workload), "meta": workload.meta}
