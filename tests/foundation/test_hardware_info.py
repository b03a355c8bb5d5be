"""A run manifest's hardware (GPU names from nvidia-smi) and a timing's conditions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentic_kvc import runs
from agentic_kvc.runs import hardware_info


def _fake_nvidia_smi(bin_dir: Path, script: str) -> None:
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_gpus_are_nvidia_smis_names_without_blank_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path, "printf 'NVIDIA H200\\n\\n  NVIDIA H100  \\n'\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert hardware_info()["gpus"] == ["NVIDIA H200", "NVIDIA H100"]


def test_no_gpus_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi
    assert hardware_info()["gpus"] == []


def test_timing_conditions_count_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A profile's `machine` names the cores a timing had (taskset), not the host's count."""
    monkeypatch.setattr(runs, "allowed_cores", lambda: [3])
    facts = runs.timing_conditions()
    assert list(facts) == [
        "platform",
        "cpu",
        "processor",
        "cores_visible",
        "python",
        "load_avg_at_start",
        "speed",
    ]
    assert facts["cores_visible"] == 1
    assert facts["speed"]["python_ms"]["best"] > 0
    assert len(facts["load_avg_at_start"]) == 3
    assert "hostname" not in facts and "gpus" not in facts
