"""How fast this machine runs a fixed piece of work now: a speed probe recorded with real runs.

A shared VM's speed changes with what its neighbours do on the host, and the load average and
the steal share do not always show it: on 2026-11-29 the same simulator run took 1.25 s of
process CPU time where it had taken 0.93 s that afternoon, on the same machine, with load and
steal unchanged (docs/statistics.md, "The machine's speed"). Real-engine latencies and the
simulator's CPU profiles (fitted on one day, read on another) move with it. So a real run,
a calibration and a timed benchmark record this probe beside the load: three fixed kernels,
timed in this thread's CPU time (what other processes and threads do to the wall clock is not
counted; what the host does to a CPU second is):

- `python`: a loop of dict, list and integer work, the interpreter's speed (the proxy, the
  engine's scheduler and the simulator are Python);
- `numpy`: sorting a fixed array of 2**21 float32 values, memory and vector speed (numpy's
  sort is single-threaded, so the thread's CPU time is all of it);
- `memory`: 2**20 random reads from a 32 MiB table, beyond the core's L2 and so in the shared
  last-level cache or memory: what a neighbour on the host takes from there shows here (the
  slowed evening above moved cache-resident work by a few percent and work with large working
  sets by a third to a half: docs/statistics.md).

Each is run `repeats` times; `best` is the machine's speed with the least interference,
`median` what a typical moment gave. Numbers compare on one machine kind only (another
processor runs the kernels differently): a ratio of two probes, not a probe alone, says how
much faster or slower the machine was.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

PYTHON_ITERATIONS = 100_000
SORT_VALUES = 1 << 21
TABLE_VALUES = 1 << 23  # float32: 32 MiB
READS = 1 << 20
REPEATS = 5
# The kernels a report shows, and their names there: the interpreter's, and the random reads
# beyond L2 that move when a neighbour on the host takes the shared cache and memory.
SHOWN = {"python_ms": "interpreter", "memory_ms": "memory"}


def _python_kernel() -> int:
    """Interpreter work of the simulator's and proxy's kind: dict gets and sets, list appends,
    integer arithmetic."""
    table: dict[int, int] = {}
    out: list[int] = []
    acc = 0
    for i in range(PYTHON_ITERATIONS):
        k = (i * 2654435761) & 4095
        acc += table.get(k, 0)
        table[k] = i
        if i & 7 == 0:
            out.append(acc & 0xFFFF)
    return acc + len(out)


def _numpy_kernel(values: np.ndarray) -> None:
    values.copy().sort()  # a copy each call: sorting a sorted array is another kernel


def _memory_kernel(table: np.ndarray, at: np.ndarray) -> None:
    table.take(at)


def _timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Thread CPU seconds of `repeats` calls of `fn`."""
    out = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        out.append(time.thread_time() - t0)
    return out


def speed_probe(repeats: int = REPEATS) -> dict[str, Any]:
    """The three kernels, `repeats` times each: their best and median thread CPU time in ms
    (module docstring). About 0.25 s on a 2-core VM at the default."""
    if repeats < 1:
        raise ValueError(f"speed_probe: repeats must be >= 1, got {repeats}")
    import numpy as np  # here: the modules that record a probe are imported by the CLI

    rng = np.random.default_rng(0)
    values = rng.random(SORT_VALUES, dtype=np.float32)
    table = np.full(TABLE_VALUES, 1.0, dtype=np.float32)  # written: its pages are mapped now
    at = rng.integers(0, TABLE_VALUES, READS)
    # Warm-ups: a first call pays for allocations and page faults the others reuse.
    _python_kernel()
    _memory_kernel(table, at)
    py = _timed(_python_kernel, repeats)
    npy = _timed(lambda: _numpy_kernel(values), repeats)
    mem = _timed(lambda: _memory_kernel(table, at), repeats)
    return {
        "python_ms": {"best": _ms(min(py)), "median": _ms(statistics.median(py))},
        "numpy_ms": {"best": _ms(min(npy)), "median": _ms(statistics.median(npy))},
        "memory_ms": {"best": _ms(min(mem)), "median": _ms(statistics.median(mem))},
        "repeats": repeats,
        "clock": "thread CPU time",
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def probe_ms(doc: dict[str, Any] | None, kernel: str = "python_ms") -> float | None:
    """A recorded probe's best time of `kernel` in ms, or None when it was not recorded."""
    if not doc:
        return None
    value = (doc.get(kernel) or {}).get("best")
    return float(value) if isinstance(value, int | float) else None


def shown_ms(doc: dict[str, Any] | None) -> str:
    """The SHOWN kernels' best of a recorded probe as "14.5 / 8.0" ("-" for a kernel it did
    not record), or "" when it recorded none of them."""
    values = [probe_ms(doc, k) for k in SHOWN]
    if all(v is None for v in values):
        return ""
    return " / ".join("-" if v is None else f"{v:.1f}" for v in values)
