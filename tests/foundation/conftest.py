"""Fixtures for the foundation tests: a minimal valid config and the fake backend."""

from __future__ import annotations

from typing import Any

import pytest
from foundation.fake_run_backend import CountingFakeBackend


@pytest.fixture
def base_config() -> dict[str, Any]:
    return {
        "backend": "sim",
        "seed": 0,
        "workload": {"generator": {"preset": "agentic-coding", "sessions": 3}},
        "fleet": {"instances": 3},
        "policy": {"name": "round_robin"},
    }


@pytest.fixture
def fake_run_backend() -> CountingFakeBackend:
    return CountingFakeBackend()
