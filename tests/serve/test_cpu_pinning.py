"""Our NIXL connector puts a worker's threads back on its own cores (vLLM's NIXL worker on CPU
pins its builder thread to the machine's last core, the same on every instance)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentic_kvc.serve.cpu_pinning import _bind_cores

CHILD = """
import os, threading, time
from agentic_kvc.serve.cpu_pinning import repin_worker
stop = threading.Event()
t = threading.Thread(target=stop.wait)
t.start()
# as vLLM does: this thread and the one already running go to the last core
last = max(os.sched_getaffinity(0))
for tid in os.listdir("/proc/self/task"):
    os.sched_setaffinity(int(tid), {last})
repin_worker()
print(sorted(os.sched_getaffinity(0)), sorted(os.sched_getaffinity(t.native_id)))
stop.set()
"""


def test_bind_cores_parses_vllm_bind_lists() -> None:
    assert _bind_cores("0") == {0}
    assert _bind_cores("0-2,5") == {0, 1, 2, 5}
    assert _bind_cores("auto") == set() and _bind_cores("") == set()


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two cores to move threads between",
)
def test_repin_moves_every_thread_to_the_bound_core() -> None:
    first = min(os.sched_getaffinity(0))
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": str(first)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == f"[{first}] [{first}]"
