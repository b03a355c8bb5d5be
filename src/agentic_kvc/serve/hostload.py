"""The machine's load over a real run: load average and CPU shares (steal included).

A real engine's latencies depend on what else the machine does (other jobs, a busy VM
neighbour taking CPU as *steal*), so every `backend: vllm` run records it in its manifest:

- `/proc/loadavg` (1-minute load, runnable/total tasks) at start, at end and every interval;
- `/proc/stat` jiffies turned into shares of user / nice / system / idle / iowait / irq /
  steal between consecutive samples (`busy` = 1 - idle - iowait), machine-wide and, over the
  whole window, per CPU (engines are pinned one per core).

`HostLoadSampler` is a daemon thread (1 Hz by default; a tick reads two small files) so it
runs beside the asyncio replay and the fleet start alike; `mark(name)` opens a named window
(e.g. `replay`) that `summary()` also reports.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC_STAT = Path("/proc/stat")
PROC_LOADAVG = Path("/proc/loadavg")

# /proc/stat column order (proc(5)); guest time is already counted in user/nice.
_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
SHARES = ("user", "nice", "system", "idle", "iowait", "irq", "steal", "busy")


def read_cpu_times(path: Path = PROC_STAT) -> dict[str, tuple[int, ...]]:
    """Cumulative jiffies per CPU line (`cpu` is the machine, `cpu0`... each core)."""
    out: dict[str, tuple[int, ...]] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        nums = [int(v) for v in values[: len(_COLUMNS)]]
        out[name] = tuple(nums + [0] * (len(_COLUMNS) - len(nums)))
    return out


def read_loadavg(path: Path = PROC_LOADAVG) -> dict[str, float] | None:
    """1/5/15-minute load averages and the runnable task count, or None off Linux."""
    try:
        parts = path.read_text().split()
        running, total = parts[3].split("/")
        return {
            "load1": float(parts[0]),
            "load5": float(parts[1]),
            "load15": float(parts[2]),
            "runnable": int(running),
            "tasks": int(total),
        }
    except (OSError, IndexError, ValueError):
        return None


def cpu_shares(a: tuple[int, ...], b: tuple[int, ...]) -> dict[str, float] | None:
    """Shares of each state between two readings of one CPU line (None if no time passed)."""
    d = dict(zip(_COLUMNS, (y - x for x, y in zip(a, b, strict=True)), strict=True))
    total = sum(d.values())
    if total <= 0:
        return None
    out = {k: d[k] / total for k in ("user", "nice", "system", "idle", "iowait", "steal")}
    out["irq"] = (d["irq"] + d["softirq"]) / total
    out["busy"] = 1.0 - out["idle"] - out["iowait"]
    return out


@dataclass(slots=True)
class Sample:
    t: float  # monotonic seconds
    load: dict[str, float] | None
    shares: dict[str, float] | None  # since the previous sample


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": round(sum(values) / len(values), 4), "max": round(max(values), 4)}


def summarize_window(
    samples: list[Sample],
    first: Mapping[str, tuple[int, ...]],
    last: Mapping[str, tuple[int, ...]],
) -> dict[str, Any]:
    """Per-sample mean/max of load1, runnable tasks and each share, plus the window's overall
    shares from its first and last CPU readings (machine-wide and per CPU)."""
    loads = [s.load for s in samples if s.load is not None]
    shares = [s.shares for s in samples if s.shares is not None]
    overall = {
        name: {k: round(v, 4) for k, v in sh.items()}
        for name in sorted(set(first) & set(last))
        if (sh := cpu_shares(first[name], last[name])) is not None
    }
    return {
        "samples": len(samples),
        "load1": _stats([x["load1"] for x in loads]),
        "runnable": _stats([x["runnable"] for x in loads]),
        "shares": {k: _stats([s[k] for s in shares]) for k in SHARES} if shares else None,
        "overall": overall.pop("cpu", None),
        "per_cpu": overall or None,
    }


@dataclass
class HostLoadSampler:
    """Samples the machine every `interval_s` from `start()` to `stop()` in a daemon thread."""

    interval_s: float = 1.0
    stat_path: Path = PROC_STAT
    loadavg_path: Path = PROC_LOADAVG
    samples: list[Sample] = field(default_factory=list)
    _marks: dict[str, tuple[float, dict[str, tuple[int, ...]]]] = field(default_factory=dict)
    _start: tuple[float, dict[str, tuple[int, ...]], dict[str, float] | None] | None = None
    _end: tuple[float, dict[str, tuple[int, ...]], dict[str, float] | None] | None = None
    _closed: dict[str, tuple[float, dict[str, tuple[int, ...]]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _reading(self) -> tuple[float, dict[str, tuple[int, ...]], dict[str, float] | None]:
        return time.monotonic(), read_cpu_times(self.stat_path), read_loadavg(self.loadavg_path)

    def start(self) -> HostLoadSampler:
        self._start = self._reading()
        self._thread = threading.Thread(target=self._loop, name="hostload", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        assert self._start is not None
        prev = self._start[1]
        while not self._stop.wait(self.interval_s):
            t, cpus, load = self._reading()
            shares = (
                cpu_shares(prev["cpu"], cpus["cpu"]) if "cpu" in prev and "cpu" in cpus else None
            )
            with self._lock:
                self.samples.append(Sample(t, load, shares))
            prev = cpus

    def mark(self, name: str) -> None:
        """Open the window `name` now (closed by `close(name)` or `stop()`)."""
        self._marks[name] = (time.monotonic(), read_cpu_times(self.stat_path))

    def close(self, name: str) -> None:
        self._closed[name] = (time.monotonic(), read_cpu_times(self.stat_path))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 + self.interval_s)
        self._end = self._reading()
        return self.summary()

    def __enter__(self) -> HostLoadSampler:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        if self._end is None:
            self.stop()

    def summary(self) -> dict[str, Any]:
        """What the manifest keeps (`host_load`): start/end readings and per-window stats."""
        if self._start is None:
            raise RuntimeError("HostLoadSampler.summary() before start()")
        t0, cpus0, load0 = self._start
        t1, cpus1, load1 = self._end or self._reading()
        with self._lock:
            samples = list(self.samples)
        out: dict[str, Any] = {
            "interval_s": self.interval_s,
            "cpus": os.cpu_count(),
            "duration_s": round(t1 - t0, 3),
            "loadavg_start": load0,
            "loadavg_end": load1,
            "run": summarize_window(samples, cpus0, cpus1),
        }
        for name, (ta, first) in self._marks.items():
            tb, last = self._closed.get(name, (t1, cpus1))
            window = [s for s in samples if ta < s.t <= tb]
            out[name] = {"duration_s": round(tb - ta, 3), **summarize_window(window, first, last)}
        return out
