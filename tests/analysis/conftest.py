"""A small results tree built from synthetic records: fresh runs, one archived, one broken."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from foundation.fake_run_backend import CountingFakeBackend

from agentic_kvc.analysis.experiments import Plan, expand
from agentic_kvc.config import load_config
from agentic_kvc.runs import execute

BASE = {
    "backend": "sim",
    "workload": {"generator": {"preset": "agentic-coding", "sessions": 5}},
    "fleet": {"instances": 3},
}


@dataclass
class Tree:
    root: Path
    results: Path
    archive: Path
    plan: Plan
    archived_id: str
    broken_id: str


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    import yaml

    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    experiments = [
        {
            "name": "exp",
            "base": "base.yaml",
            "matrix": {"policy.name": ["round_robin"], "seed": [0, 1, 2]},
        }
    ]
    results, archive = tmp_path / "results", tmp_path / "results" / "archive"
    backend = CountingFakeBackend()
    plan = expand(experiments, tmp_path)
    ids = plan.run_ids()
    for planned in plan.runs:
        execute(load_config(tmp_path / planned.base, list(planned.overrides)), results, backend)
    # Seed 2 lives only in the archive (made elsewhere); seed 1's fresh copy is broken.
    archive.mkdir(parents=True)
    shutil.move(results / "runs" / ids[2], archive / ids[2])
    (results / "runs" / ids[1] / "requests.jsonl").unlink()
    return Tree(tmp_path, results, archive, expand(experiments, tmp_path, archive), ids[2], ids[1])
