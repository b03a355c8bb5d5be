"""Shared fixtures: where the public traces and the tiny model live; Hypothesis's settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: a property test asserts behaviour, and its 200 ms default fails
# examples that a busy shared 2-core machine merely slowed (seen in
# test_the_no_session_shortcut_answers_as_the_full_lookup, 2026-12-02). Speed goals live in
# benchmarks. Tests' own @settings keep their other fields and inherit this.
settings.register_profile("akvc", deadline=None)
settings.load_profile("akvc")

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
