"""Managed processes: whole trees stopped, stubborn ones killed, nothing left behind."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from agentic_kvc.serve import procs
from agentic_kvc.serve.procs import ManagedProcess, live_processes, related_pids


def _wait_for(cond, timeout: float = 5.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_stop_reaches_children_that_left_the_group(tmp_path: Path) -> None:
    # One child stays in the group; one calls setsid (as some servers' workers do).
    script = "sleep 300 & setsid sleep 301 & echo started; wait"
    proc = ManagedProcess("tree", ["sh", "-c", script], tmp_path / "tree.log").start()
    assert _wait_for(lambda: len(related_pids(proc.pid)) >= 3)
    assert proc in live_processes()
    proc.stop(grace_s=2.0)
    assert proc.remaining() == set()
    assert proc not in live_processes()
    assert "started" in proc.log_tail()
    assert "# tree: sh -c" in proc.log_tail()  # the command line heads the log


def test_sigterm_ignoring_process_is_killed(tmp_path: Path) -> None:
    script = "trap '' TERM; echo ready; while true; do sleep 0.1; done"
    proc = ManagedProcess("stubborn", ["sh", "-c", script], tmp_path / "s.log").start()
    assert _wait_for(lambda: "ready" in proc.log_tail())
    t0 = time.monotonic()
    proc.stop(grace_s=0.5)
    assert time.monotonic() - t0 < 5.0
    assert proc.remaining() == set() and not proc.alive()


def test_kill_simulates_a_crash(tmp_path: Path) -> None:
    proc = ManagedProcess("c", ["sleep", "300"], tmp_path / "c.log").start()
    proc.kill()
    assert _wait_for(lambda: not proc.alive())
    assert proc.returncode() == -9
    proc.stop()
    assert proc.remaining() == set()


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) not installed")
def test_cpus_pin_the_process_and_its_children(tmp_path: Path) -> None:
    import os

    core = max(os.sched_getaffinity(0))
    script = "sleep 300 & wait"  # the shell is pinned, and its child inherits that
    proc = ManagedProcess("pin", ["sh", "-c", script], tmp_path / "p.log", cpus=[core]).start()
    try:
        assert _wait_for(lambda: len(related_pids(proc.pid)) >= 2)
        assert all(os.sched_getaffinity(pid) == {core} for pid in related_pids(proc.pid))
    finally:
        proc.stop(grace_s=2.0)


def test_a_pid_seen_earlier_is_not_signalled_once_another_process_has_it(tmp_path: Path) -> None:
    # A stranger (not of the tree) stands in for a process that got a tracked pid after the
    # tree's own process died: same pid, another start time.
    import subprocess

    stranger = subprocess.Popen(["sleep", "300"])
    proc = ManagedProcess("t", ["sleep", "300"], tmp_path / "t.log").start()
    try:
        assert proc.pid is not None and stranger.pid not in proc.remaining()
        proc._tracked[stranger.pid] = -1  # seen earlier, at another start time
        assert stranger.pid not in proc.remaining()
        proc.stop(grace_s=1.0)
        assert stranger.poll() is None  # left alone
        # With the start time it had when seen, a pid is still this tree's (reparented child).
        proc._tracked[stranger.pid] = procs._start_time(stranger.pid)  # type: ignore[assignment]
        assert stranger.pid in proc.remaining()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_reused_root_pid_and_its_group_are_not_the_tree(tmp_path: Path) -> None:
    script = "sleep 300 & wait"
    proc = ManagedProcess("r", ["sh", "-c", script], tmp_path / "r.log").start()
    try:
        assert _wait_for(lambda: len(proc.remaining()) >= 2)
        root_start = proc._root_start
        proc._root_start = -1  # as if the pid now named a process started at another time
        proc._tracked.clear()
        assert proc.remaining() == set()
        proc._root_start = root_start
        assert len(proc.remaining()) >= 2
    finally:
        proc.stop(grace_s=2.0)
    assert proc.remaining() == set()
