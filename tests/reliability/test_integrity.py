"""Results integrity: interrupted runs, run directories tied to one config, whole-line records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentic_kvc.analysis.load import find_runs
from agentic_kvc.config import load_config
from agentic_kvc.io import read_jsonl
from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.server import ServerThread
from agentic_kvc.runs import RUN_FILES, complete_runs, execute, is_complete
from agentic_kvc.security import PathEscape
from agentic_kvc.serve.services import ProxyProcess
from tests.process_helpers import default_sigint

# A simulated run of a few seconds: long enough to be interrupted in the middle.
CONFIG = {"backend": "sim", "workload": {"generator": {"sessions": 150}}}
AKVC = [sys.executable, "-m", "agentic_kvc.cli"]


def _start_run(cfg: Path, results: Path) -> subprocess.Popen[bytes]:
    # SIGINT as a terminal's Ctrl-C finds it, even when pytest runs in the background.
    return subprocess.Popen(
        [*AKVC, "run", str(cfg), "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=default_sigint,
    )


@pytest.mark.parametrize(
    "sig",
    [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGKILL],
    ids=["SIGINT", "SIGKILL"],
)
def test_interrupted_run_is_incomplete_ignored_and_redone(tmp_path: Path, sig: int) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(json.dumps(CONFIG))  # JSON is YAML
    results = tmp_path / "results"
    run_dir = results / "runs" / load_config(CONFIG).run_id()
    proc = _start_run(cfg, results)
    deadline = time.monotonic() + 60
    while not (run_dir / "manifest.json").is_file():  # the backend is running now
        assert proc.poll() is None, proc.stdout.read().decode()  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.02)
    time.sleep(0.1)  # the replay takes about 1 s after the manifest
    proc.send_signal(sig)
    assert proc.wait(timeout=30) != 0
    # Marked incomplete, so analysis does not see it. (Not "no requests.jsonl": a kill that
    # lands late, on a loaded machine, can find it written and the manifest not yet flipped;
    # seen in `make test-reliability` 2026-11-24. Still incomplete, still ignored and redone.)
    assert run_dir.is_dir() and not is_complete(run_dir)
    assert json.loads((run_dir / "manifest.json").read_text())["complete"] is False
    assert complete_runs(results) == [] and find_runs(results) == []
    # The next run clears it and redoes it.
    again = subprocess.run(
        [*AKVC, "run", str(cfg), "--results", str(results)], capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert "incomplete; starting it again" in again.stderr
    assert is_complete(run_dir) and [r.run_id for r in find_runs(results)] == [run_dir.name]
    assert all((run_dir / f).is_file() for f in RUN_FILES)
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_a_run_directory_is_never_reused_for_another_config(tmp_path: Path) -> None:
    cfg = load_config({"backend": "sim", "workload": {"generator": {"sessions": 2}}})
    run_dir = execute(cfg, tmp_path)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    # Another config's files in this run's directory (what a run-id collision would look
    # like): the run refuses it instead of returning or overwriting it.
    other = load_config({"backend": "sim", "seed": 7, "workload": {"generator": {"sessions": 2}}})
    (run_dir / "config.json").write_text(json.dumps(other.canonical()))
    with pytest.raises(RuntimeError, match="different config"):
        execute(cfg, tmp_path)
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if k != "config.json"} == {
        k: v for k, v in before.items() if k != "config.json"
    }


def test_a_symlinked_run_directory_cannot_escape_the_results_root(tmp_path: Path) -> None:
    cfg = load_config({"backend": "sim", "workload": {"generator": {"sessions": 2}}})
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    (runs / cfg.run_id()).symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathEscape):
        execute(cfg, tmp_path / "results")
    assert (outside / "precious.txt").read_text() == "keep me"
    assert [p.name for p in outside.iterdir()] == ["precious.txt"]


def test_proxy_records_survive_sigkill_under_load_as_whole_lines(tmp_path: Path) -> None:
    """The proxy appends whole lines in one write; SIGKILL mid-load leaves no torn line."""
    fakes = [ServerThread(FakeVLLM()).start() for _ in range(2)]
    records = tmp_path / "records.jsonl"
    proxy = ProxyProcess([f.url for f in fakes], "round_robin", tmp_path, records=records)
    try:
        proxy.start()
        body = {"prompt": list(range(40)), "max_tokens": 3, "stream": True}
        with httpx.Client(base_url=proxy.url, timeout=10) as client:
            t0 = time.monotonic()
            sent = 0
            while time.monotonic() - t0 < 2.5:  # the sink flushes every second
                assert client.post("/v1/completions", json=body).status_code == 200
                sent += 1
        assert proxy.proc is not None
        proxy.proc.kill(signal.SIGKILL)
        rows = list(read_jsonl(records))  # raises, naming the line, on a torn one
        assert 0 < len(rows) <= sent
        assert records.read_bytes().endswith(b"\n")
        assert all(r["error"] is None and r["output_tokens"] == 3 for r in rows)
    finally:
        proxy.stop()
        for f in fakes:
            f.stop()


def test_run_files_are_written_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    """A crash while writing results leaves the old file or none, never half of one."""
    from agentic_kvc import io

    target = tmp_path / "requests.jsonl"
    io.atomic_write_jsonl(target, [{"a": 1}])

    def crash(*_a: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        io.atomic_write_jsonl(target, [{"a": 2}] * 1000)
    assert list(read_jsonl(target)) == [{"a": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["requests.jsonl"]
