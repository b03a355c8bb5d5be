"""Shared fixtures: where the public traces and the tiny model live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("AKVC_SHARED_TRACES", REPO.parent / "shared" / "traces"))
TINY_MODEL = Path(os.environ.get("AKVC_TINY_MODEL", REPO / "models" / "tiny-qwen2"))


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The public traces beside the repo (never copied into it); skip if absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"public traces not found at {SHARED_TRACES}")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    if not (TINY_MODEL / "config.json").is_file():
        pytest.skip(f"tiny model not built at {TINY_MODEL} (run `make model`)")
    return TINY_MODEL
