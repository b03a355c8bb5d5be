"""`akvc serve vllm --proxy` on a real engine: ready, serving, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.process_helpers import default_sigint

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _pids_mentioning(needles: list[str]) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(n in cmd for n in needles):
            found.append(int(pid))
    return found


def test_serve_cli_ctrl_c_stops_every_process(tiny_model: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    cmd = [sys.executable, "-m", "agentic_kvc.cli", "serve", "vllm", "-n", "1"]
    cmd += ["--model", str(tiny_model), "--device", "cpu", "--proxy", "--log-dir", str(logs)]
    # SIGINT as a terminal's Ctrl-C finds it, even when pytest runs in the background.
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    )
    ports: list[str] = []
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 400
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"akvc serve exited early:\n{''.join(lines)}"
            lines.append(line)
            if "ready; Ctrl-C" in line:
                break
        out = "".join(lines)
        engine = re.search(r"vllm\[0\] (http://\S+)", out)
        proxy = re.search(r"proxy (http://\S+)", out)
        assert engine and proxy, out
        model = httpx.get(proxy.group(1) + "/v1/models", timeout=10).json()["data"][0]["id"]
        body = {"model": model, "prompt": [1000, 1001, 1002], "max_tokens": 3, "stream": False}
        r = httpx.post(proxy.group(1) + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        ports = [engine.group(1).rsplit(":", 1)[1], proxy.group(1).rsplit(":", 1)[1]]
        assert _pids_mentioning([f"--port {p}" for p in ports])
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        proc.wait(timeout=60)
        assert proc.returncode == 0
        assert _pids_mentioning([f"--port {p}" for p in ports]) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        _stop_leftovers(ports)
    assert (logs / "vllm-0.log").is_file() and (logs / "proxy.log").is_file()
    assert (logs / "serve.json").is_file()


def _stop_leftovers(ports: list[str]) -> None:
    """After a failure above, the engine and proxy `akvc serve` started must not outlive the
    test (they would hold the cores for the tests after it): SIGTERM lets the engine stop its
    own workers, SIGKILL what is still there after 30 s."""
    needles = [f"--port {p}" for p in ports]
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 0.0)):
        pids = _pids_mentioning(needles) if needles else []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while pids and time.monotonic() < deadline and _pids_mentioning(needles):
            time.sleep(0.5)
