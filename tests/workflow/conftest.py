"""A throwaway copy of the pipeline (Snakefile, workflow/, config/, notebooks/, artifact/ ...)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIPELINE_PARTS = ("Snakefile", "workflow", "config", "notebooks", "envs", "benchmarks", "artifact")
FAKE_AKVC = Path(__file__).with_name("fake_akvc.py")


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    root = tmp_path / "wf"
    root.mkdir()
    for part in PIPELINE_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / part)
    return root
