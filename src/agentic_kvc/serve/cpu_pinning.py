"""Worker thread pinning for NIXL fleets on CPU (no vLLM import: tests load it cheaply)."""

from __future__ import annotations

import os


def _bind_cores(spec: str) -> set[int]:
    """Cores named by VLLM_CPU_OMP_THREADS_BIND ("0", "0-3", "0,2"; "" or "auto": none)."""
    cores: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        lo, _, hi = part.partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return cores


def repin_worker() -> list[int]:
    """Put every thread of this worker back on its own cores.

    vLLM's NIXL worker on CPU pins the thread that builds it (the worker's main thread, which
    also waits on the engine's message queue) to the last core of each NUMA node, on every
    instance alike: on a 2-core machine P's and D's main threads both land on core 1, D's
    core, and P's busy-wait there starved D for tens of seconds (lifecycle records with ~30 s
    gaps, P releasing expired blocks D then read). Each instance's worker gets its cores from
    VLLM_CPU_OMP_THREADS_BIND (serve.launcher, CPU only), so every thread goes back there;
    without it (GPU fleets, `auto`) nothing moves.
    """
    cores = _bind_cores(os.environ.get("VLLM_CPU_OMP_THREADS_BIND", ""))
    if not cores or not hasattr(os, "sched_setaffinity"):
        return []
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that ended meanwhile
            continue
    return sorted(cores)
