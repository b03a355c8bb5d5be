"""Busy neighbours: processes that spin a core each, outside this process tree.

A shared host's other jobs slow a CPU engine down, and the simulator's background term
(`sim.host_neighbour_threads`) is fitted and checked against runs whose neighbours are known.
`busy_neighbours(n)` makes such a load on purpose. Each spinner is double-forked so that
init, not us, is its parent: the host-load sampler (serve/hostload.py) then counts it among
the others, as it would a real neighbour.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

# The intermediate process prints the spinner's pid and exits; the spinner drops the pipes
# (run() waits for their EOF) and spins until killed, or until its owner (argv[1]) is gone, so
# that a killed benchmark leaves no spinner behind.
_SPIN = (
    "import os, sys\n"
    "owner = int(sys.argv[1])\n"
    "pid = os.fork()\n"
    "if pid:\n"
    "    print(pid)\n"
    "    sys.exit()\n"
    "null = os.open(os.devnull, os.O_WRONLY)\n"
    "os.dup2(null, 1)\n"
    "os.dup2(null, 2)\n"
    "while True:\n"
    "    for _ in range(2_000_000):\n"
    "        pass\n"
    "    try:\n"
    "        os.kill(owner, 0)\n"
    "    except ProcessLookupError:\n"
    "        sys.exit()\n"
)


def spawn_spinner() -> int:
    """Start one spinner outside this process tree; its pid."""
    out = subprocess.run(
        [sys.executable, "-c", _SPIN, str(os.getpid())],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(out.stdout)


@contextmanager
def busy_neighbours(count: int) -> Iterator[list[int]]:
    """`count` spinners for the duration of the block (none for 0); killed on exit."""
    if count < 0:
        raise ValueError(f"busy neighbours: count must be >= 0, got {count}")
    pids: list[int] = []
    try:
        for _ in range(count):
            pids.append(spawn_spinner())
        yield pids
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
