"""A throwaway copy of the pipeline with the artifact registry (helpers: pipeline_helpers.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.artifact.pipeline_helpers import PARTS, REPO


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    root = tmp_path / "wf"
    root.mkdir()
    for part in PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, root / part)
    return root
