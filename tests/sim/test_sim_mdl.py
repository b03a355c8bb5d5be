"""Queueing against a closed form: one instance without batching is an M/D/1 queue."""

from __future__ import annotations

import pytest

from agentic_kvc.sim.mdl import mdl_check, mdl_wq


def test_pollaczek_khinchine_value() -> None:
    assert mdl_wq(0.5, 0.2) == pytest.approx(0.1)


@pytest.mark.parametrize("load", [0.3, 0.6])
def test_mean_wait_matches_md1(load: float) -> None:
    got = mdl_check(load, 30_000, seed=0)
    assert got["utilisation"] == pytest.approx(load, rel=0.03)
    assert abs(got["rel_error"]) < 0.05


@pytest.mark.slow
def test_mean_wait_matches_md1_at_high_load() -> None:
    # Waits at 0.9 are strongly autocorrelated: many more requests for the same precision.
    got = mdl_check(0.9, 400_000, seed=0)
    assert abs(got["rel_error"]) < 0.05
