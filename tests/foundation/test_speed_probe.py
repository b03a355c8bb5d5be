"""The machine's speed probe: what it records, and the ratio read from two of them."""

from __future__ import annotations

import time

import pytest

from agentic_kvc import speed_probe as sp


def test_probe_records_best_and_median_of_each_kernel() -> None:
    out = sp.speed_probe(repeats=3)
    assert out["repeats"] == 3 and out["clock"] == "thread CPU time"
    for kernel in ("python_ms", "numpy_ms", "memory_ms"):
        assert 0 < out[kernel]["best"] <= out[kernel]["median"]
    assert sp.probe_ms(out) == out["python_ms"]["best"]
    assert sp.probe_ms(out, "numpy_ms") == out["numpy_ms"]["best"]


def test_probe_counts_this_threads_cpu_not_the_wall_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel that sleeps (the wall clock runs, this thread's CPU does not) is not slower:
    the probe measures what a CPU second costs, not what else holds the machine."""
    real = sp._python_kernel

    def sleepy() -> int:
        time.sleep(0.05)
        return real()

    quiet = sp.speed_probe(repeats=1)["python_ms"]["best"]
    monkeypatch.setattr(sp, "_python_kernel", sleepy)
    slept = sp.speed_probe(repeats=1)["python_ms"]["best"]
    assert slept < quiet + 40  # 50 ms of sleep would show as 50 ms on the wall clock


def test_shown_kernels_read_as_one_cell() -> None:
    both = {"python_ms": {"best": 14.46}, "memory_ms": {"best": 8.04}, "numpy_ms": {"best": 9}}
    assert sp.shown_ms(both) == "14.5 / 8.0"
    assert sp.shown_ms({"python_ms": {"best": 14.46}}) == "14.5 / -"  # before the memory kernel
    assert sp.shown_ms({"numpy_ms": {"best": 9.0}}) == "" and sp.shown_ms(None) == ""


def test_repeats_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        sp.speed_probe(repeats=0)
