"""The real-engine step trace of the tier benchmarks (benchmarks/vllm_step_trace.py) and the race
benchmark's reading of it (benchmarks/tier_store_race_real.py, `step_reading`): what the trace
writes and how a row's blocks are read from it, without an engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tier_store_race_real as race  # noqa: E402
import vllm_step_trace as trace  # noqa: E402


def test_the_environment_loads_the_trace_only_when_asked(tmp_path: Path) -> None:
    env = trace.trace_env(tmp_path / "t")
    assert (tmp_path / "t" / "sitecustomize.py").is_file()
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(tmp_path / "t"), str(BENCH)]
    probe = "import sys; print('vllm_step_trace' in sys.modules)"
    off = {**os.environ, **env, trace.ENV: ""}  # the folder unset: nothing is imported
    out = subprocess.run([sys.executable, "-c", probe], env=off, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


def test_wrapped_calls_are_written_in_order_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Engine:
        def step(self, n: int) -> int:
            return n + 1

    emit = trace._Sink(str(tmp_path))

    def around(orig, self, n):  # type: ignore[no-untyped-def]
        emit(ev="step", n=n)
        return orig(self, n)

    assert trace._wrap(Engine, "step", around)
    assert Engine().step(1) == 2 and Engine().step(5) == 6
    assert not trace._wrap(Engine, "missing", around)
    assert "Engine.missing not found" in capsys.readouterr().err
    events = trace.read_trace(tmp_path)
    assert [e["n"] for e in events] == [1, 5] and events[0]["t"] <= events[1]["t"]


def test_a_coroutine_method_stays_one(tmp_path: Path) -> None:
    import asyncio
    import inspect

    class Server:
        async def handle(self, n: int) -> int:
            return n * 2

    emit = trace._Sink(str(tmp_path))

    def around(orig, self, n):  # type: ignore[no-untyped-def]
        emit(ev="handle", n=n)
        return orig(self, n)

    assert trace._wrap(Server, "handle", around)
    assert inspect.iscoroutinefunction(Server.handle)
    assert asyncio.run(Server().handle(4)) == 8
    assert [e["n"] for e in trace.read_trace(tmp_path)] == [4]


def _events(b_tries: int, stored_first: list[int]) -> list[dict]:
    """A frees blocks 1-6 (its prompt 1-4 and two decode blocks); B fails `b_tries` times, then
    is admitted with blocks 6, 5, 4, 3 (taken from the free queue's head: A's tail first)."""
    ev: list[dict] = [
        {"ev": "add", "req": "A", "prompt": 4},
        {"ev": "add", "req": "B", "prompt": 4},
    ]
    ev += [{"ev": "alloc", "req": "B", "ok": False, "blocks": []}] * b_tries
    ev += [{"ev": "free", "req": "A", "blocks": [1, 2, 3, 4, 5, 6]}, {"ev": "schedule"}]
    if stored_first:
        ev += [{"ev": "store", "gpu": stored_first}, {"ev": "schedule"}]
    ev += [
        {"ev": "alloc", "req": "B", "ok": True, "blocks": [6, 5, 4, 3]},
        {"ev": "store", "gpu": []},
    ]
    return ev


def test_the_race_reading_counts_what_b_took_before_the_walk() -> None:
    got = race.step_reading(_events(3, []), "A", "B", 4)
    assert got["b_failed_tries"] == 3 and got["schedule_calls_between"] == 1
    assert got["a_stored_before_b_admitted"] == 0
    assert got["a_taken_unstored_by_b"] == 2  # prompt blocks 3 and 4; 5 and 6 were decode
    # a walk between A's release and B's admission stored A first: nothing taken unstored
    got = race.step_reading(_events(0, [1, 2, 3, 4, 5, 6]), "A", "B", 4)
    assert got["a_stored_before_b_admitted"] == 4 and got["a_taken_unstored_by_b"] == 0
    assert race.full_adds(_events(0, []), 4) == ["A", "B"]
