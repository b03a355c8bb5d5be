"""A small results tree made as the pipeline makes one: a plan expanded from experiment entries
(`analysis.experiments.expand`, as for config/config.yaml), each planned run executed by the
real simulator, and the plan file the notebooks read. Built once per test session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentic_kvc.analysis.experiments import expand
from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.run_backend import backend_for
from agentic_kvc.runs import execute

REPO = Path(__file__).resolve().parents[2]
BASE = "config/runs/sim_agentic.yaml"
SMALL = {"workload.generator.sessions": 8}  # a few multi-turn sessions, ~15 requests a run

EXPERIMENTS: list[dict[str, Any]] = [
    # Two policies x two seeds: pairs for the paired statistics.
    {
        "name": "tiny_policies",
        "base": BASE,
        "set": SMALL,
        "matrix": {"policy.name": ["round_robin", "lmetric"], "seed": [0, 1]},
    },
    # A `backend: vllm` run whose simulated twin is round_robin seed 0 above.
    {
        "name": "tiny_real",
        "base": BASE,
        "set": {**SMALL, "backend": "vllm"},
        "matrix": {"policy.name": ["round_robin"], "seed": [0]},
    },
]


@pytest.fixture(scope="session")
def sim_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RESULTS with runs/ and work/plan.json, plus an unplanned incomplete run the notebooks
    must not read."""
    root = tmp_path_factory.mktemp("nbval") / "results"
    plan = expand(EXPERIMENTS, REPO)
    # Every run, the "real" one too, is simulated: no engine in unit tests.
    sim = backend_for("sim")
    for run in plan.runs:
        execute(load_config(REPO / run.base, list(run.overrides)), root, backend=sim)
    atomic_write_json(root / "work" / "plan.json", plan.to_json())
    cfg = load_config(REPO / BASE, ["workload.generator.sessions=8", "seed=7"])
    broken = execute(cfg, root, backend=sim) / "manifest.json"
    broken.write_text(json.dumps({**json.loads(broken.read_text()), "complete": False}))
    return root
