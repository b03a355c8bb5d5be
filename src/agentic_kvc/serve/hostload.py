"""The machine's load over a real run: load average and CPU shares (steal included).

A real engine's latencies depend on what else the machine does (other jobs, a busy VM
neighbour taking CPU as *steal*), so every `backend: vllm` run records it in its manifest:

- `/proc/loadavg` (1-minute load, runnable/total tasks) at start, at end and every interval;
- `/proc/stat` jiffies turned into shares of user / nice / system / idle / iowait / irq /
  steal between consecutive samples (`busy` = 1 - idle - iowait), machine-wide and, over the
  whole window, per CPU (engines are pinned one per core);
- the CPU time of this process and its descendants (engines, proxy, client: `own_cores`) and
  the rest of the busy time (`others_cores`: neighbours and steal), in cores over each window,
  and per sample the runnable threads of each (`own_runnable`, `others_runnable`). Load1 mixes
  the two; the simulator's background term wants the neighbours alone.

`HostLoadSampler` is a daemon thread (1 Hz by default; a tick reads two small files) so it
runs beside the asyncio replay and the fleet start alike; `mark(name)` opens a named window
(e.g. `replay`) that `summary()` also reports. At its start and stop it also runs the machine's
speed probe (agentic_kvc/speed_probe.py: about 0.25 s each), since a shared VM can run slower
with the same load and steal.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_kvc.speed_probe import speed_probe

PROC = Path("/proc")
PROC_STAT = PROC / "stat"
PROC_LOADAVG = PROC / "loadavg"

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


@dataclass(frozen=True, slots=True)
class TreeReading:
    """This process tree against the rest of the machine at one instant."""

    jiffies: int  # CPU time (user + system, with reaped children's) of the tree's processes
    own_runnable: int  # the tree's threads in state R
    others_runnable: int  # every other thread in state R (neighbours)


def _stat_fields(path: Path) -> list[str] | None:
    try:
        text = path.read_text()
    except OSError:
        return None  # exited while we looked
    # The command name is in parentheses and may hold spaces: fields start after ')'.
    return text[text.rfind(")") + 2 :].split()


def read_tree(root_pid: int, proc: Path = PROC) -> TreeReading | None:
    """`root_pid` and its live descendants against everyone else, or None when `root_pid`
    is not found. A child reaped between two readings moves from its own CPU count to its
    parent's, so the tree's sum stays continuous. Runnable threads are what the kernel shares
    the cores among: a neighbour's busy thread costs a parallel engine step more latency than
    its CPU share suggests (2026-11-25, docs/sim_profiles.md)."""
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in proc.glob("[0-9]*/stat"):
        fields = _stat_fields(entry)
        try:
            pid = int(entry.parent.name)
            parent[pid] = int(fields[1])  # type: ignore[index]
            used[pid] = sum(int(x) for x in fields[11:15])  # type: ignore[index]
        except (IndexError, TypeError, ValueError):
            continue
    if root_pid not in used:
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    tree: set[int] = set()
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, ()))
    own = others = 0
    for pid in used:
        for task in (proc / str(pid) / "task").glob("[0-9]*/stat"):
            fields = _stat_fields(task)
            if fields and fields[0] == "R":
                if pid in tree:
                    own += 1
                else:
                    others += 1
    return TreeReading(sum(used[pid] for pid in tree), own, others)


def own_and_others(
    first: tuple[int, ...], last: tuple[int, ...], cpus: int, own_jiffies: int
) -> dict[str, float] | None:
    """Busy cores split into this process tree's (`own_cores`) and everyone else's
    (`others_cores`, steal included) between two readings of the machine's `cpu` line."""
    total = sum(y - x for x, y in zip(first, last, strict=True))
    shares = cpu_shares(first, last)
    if total <= 0 or shares is None:
        return None
    own = min(own_jiffies / total * cpus, shares["busy"] * cpus)
    return {"own_cores": round(own, 4), "others_cores": round(shares["busy"] * cpus - own, 4)}


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
    split: dict[str, float] | None = None  # own_cores / others_cores since the previous sample
    tree: TreeReading | None = None  # at this sample


# One reading: (monotonic s, /proc/stat CPU lines, this process tree's jiffies or None).
Reading = tuple[float, dict[str, tuple[int, ...]], TreeReading | None]


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": round(sum(values) / len(values), 4), "max": round(max(values), 4)}


def _split(a: Reading, b: Reading) -> dict[str, float] | None:
    cpus = sum(1 for name in b[1] if name != "cpu")
    if a[2] is None or b[2] is None or "cpu" not in a[1] or "cpu" not in b[1] or not cpus:
        return None
    return own_and_others(a[1]["cpu"], b[1]["cpu"], cpus, b[2].jiffies - a[2].jiffies)


def summarize_window(samples: list[Sample], first: Reading, last: Reading) -> dict[str, Any]:
    """Per-sample mean/max of load1, runnable tasks and each share, plus the window's overall
    shares from its first and last readings (machine-wide and per CPU) and its busy cores
    split into this process tree's and the others'."""
    loads = [s.load for s in samples if s.load is not None]
    shares = [s.shares for s in samples if s.shares is not None]
    splits = [s.split for s in samples if s.split is not None]
    trees = [s.tree for s in samples if s.tree is not None]
    overall = {
        name: {k: round(v, 4) for k, v in sh.items()}
        for name in sorted(set(first[1]) & set(last[1]))
        if (sh := cpu_shares(first[1][name], last[1][name])) is not None
    }
    return {
        "samples": len(samples),
        "load1": _stats([x["load1"] for x in loads]),
        "runnable": _stats([x["runnable"] for x in loads]),
        "shares": {k: _stats([s[k] for s in shares]) for k in SHARES} if shares else None,
        "overall": overall.pop("cpu", None),
        "per_cpu": overall or None,
        "cores": _split(first, last),
        "others_cores": _stats([s["others_cores"] for s in splits]),
        "own_runnable": _stats([float(t.own_runnable) for t in trees]),
        "others_runnable": _stats([float(t.others_runnable) for t in trees]),
    }


@dataclass
class HostLoadSampler:
    """Samples the machine every `interval_s` from `start()` to `stop()` in a daemon thread."""

    interval_s: float = 1.0
    stat_path: Path = PROC_STAT
    loadavg_path: Path = PROC_LOADAVG
    proc_path: Path = PROC  # per-process stat files, for this process tree's CPU time
    root_pid: int = field(default_factory=os.getpid)
    probe: bool = True  # the speed probe at start and stop (`speed_start`, `speed_end`)
    samples: list[Sample] = field(default_factory=list)
    _speed: dict[str, dict[str, Any]] = field(default_factory=dict)
    _marks: dict[str, Reading] = field(default_factory=dict)
    _start: tuple[Reading, dict[str, float] | None] | None = None
    _end: tuple[Reading, dict[str, float] | None] | None = None
    _closed: dict[str, Reading] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _cpu_reading(self) -> Reading:
        return (
            time.monotonic(),
            read_cpu_times(self.stat_path),
            read_tree(self.root_pid, self.proc_path),
        )

    def _reading(self) -> tuple[Reading, dict[str, float] | None]:
        return self._cpu_reading(), read_loadavg(self.loadavg_path)

    def start(self) -> HostLoadSampler:
        if self.probe:
            self._speed["speed_start"] = speed_probe()
        self._start = self._reading()
        self._thread = threading.Thread(target=self._loop, name="hostload", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        assert self._start is not None
        prev = self._start[0]
        while not self._stop.wait(self.interval_s):
            now, load = self._reading()
            a, b = prev[1], now[1]
            shares = cpu_shares(a["cpu"], b["cpu"]) if "cpu" in a and "cpu" in b else None
            with self._lock:
                self.samples.append(Sample(now[0], load, shares, _split(prev, now), now[2]))
            prev = now

    def mark(self, name: str) -> None:
        """Open the window `name` now (closed by `close(name)` or `stop()`)."""
        self._marks[name] = self._cpu_reading()

    def close(self, name: str) -> None:
        self._closed[name] = self._cpu_reading()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 + self.interval_s)
        self._end = self._reading()
        if self.probe and "speed_end" not in self._speed:
            self._speed["speed_end"] = speed_probe()
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
        first, load0 = self._start
        last, load1 = self._end or self._reading()
        with self._lock:
            samples = list(self.samples)
        out: dict[str, Any] = {
            "interval_s": self.interval_s,
            "cpus": os.cpu_count(),
            "duration_s": round(last[0] - first[0], 3),
            "loadavg_start": load0,
            "loadavg_end": load1,
            "run": summarize_window(samples, first, last),
            **self._speed,
        }
        for name, a in self._marks.items():
            b = self._closed.get(name, last)
            window = [s for s in samples if a[0] < s.t <= b[0]]
            out[name] = {"duration_s": round(b[0] - a[0], 3), **summarize_window(window, a, b)}
        return out
