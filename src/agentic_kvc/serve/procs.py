"""Child server processes that are always stopped: own process group, log file, verified exit.

A vLLM server is several processes (API server, engine core, workers) started by
multiprocessing, so stopping the one we launched is not enough. Every server starts in a new
session (its own process group); stopping sends SIGTERM to the group and to any descendant
that left it, waits, then SIGKILLs what is left and checks /proc that nothing survived.

Every started process is registered; `atexit` and a SIGTERM/SIGHUP handler stop whatever a
crash or an interrupted run left behind (SIGINT already unwinds context managers through
KeyboardInterrupt).

A pid alone does not name a process: once a process is reaped the kernel may hand its pid to
another (pid_max is often 32768). So a process is known by its pid and its start time (field
22 of /proc/PID/stat), and a pid seen earlier is signalled only while both still match.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentic_kvc.security import redact_argv

_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


class ProcessError(RuntimeError):
    """A server that could not start or died; the message carries its log tail."""


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgid, start time in clock ticks after boot) of a live pid from /proc, or None
    if it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _start_time(pid: int) -> int | None:
    """When live process `pid` started (clock ticks after boot); None if it is gone."""
    st = _proc_stat(pid)
    return None if st is None else st[2]


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _related(root: int, root_start: int | None = None) -> dict[int, int]:
    """`related_pids` with each pid's start time. With `root_start`, a live `root` that
    started at another time is a stranger that was given the pid: then neither it nor its
    group is ours (while any member of our group lived, the kernel would not reuse the pid)."""
    table: dict[int, tuple[int, int, int]] = {}
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st is not None:
            table[pid] = st
    if root_start is not None and root in table and table[root][2] != root_start:
        return {}
    found = {pid for pid, (_pp, pg, _t) in table.items() if pg == root}
    if root in table:
        found.add(root)
    # Descendants that called setsid() left the group; walk the parent links as well.
    frontier = set(found)
    while frontier:
        children = {pid for pid, (pp, _pg, _t) in table.items() if pp in frontier} - found
        found |= children
        frontier = children
    return {pid: table[pid][2] for pid in found}


def related_pids(root: int) -> set[int]:
    """Live processes in root's process group plus all of root's descendants."""
    return set(_related(root))


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class ManagedProcess:
    """One server process tree with a log file. Use `start()`, `stop()`, or `with`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        cpus: Iterable[int] | None = None,
    ) -> None:
        self.name = name
        # CPU cores the process (and what it starts, which inherits it) may run on.
        self.cpus = set(cpus) if cpus is not None else None
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None
        self._root_start: int | None = None  # the launched process's start time
        # Processes of the tree seen so far (pid -> start time), kept after their parent dies
        # (reparented to init, they leave the parent links).
        self._tracked: dict[int, int] = {}

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def start(self) -> ManagedProcess:
        if self.popen is not None:
            raise ProcessError(f"{self.name}: already started")
        _install_handlers()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv
        taskset = shutil.which("taskset") if self.cpus else None
        if taskset:
            # Pinned from its first instruction, so nothing it starts can escape the set.
            argv = [taskset, "-c", ",".join(map(str, sorted(self.cpus or ()))), *argv]
        with self.log_path.open("ab") as log:
            log.write(f"# {self.name}: {' '.join(redact_argv(argv))}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # own process group: stop() reaches every child
            )
        # Our unreaped child: its pid cannot have been reused yet.
        self._root_start = _start_time(self.popen.pid)
        if self.cpus and not taskset:
            # No taskset (util-linux): pin right after the start; a child the program starts
            # within microseconds could escape, which a server's slow start-up makes unlikely.
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(self.popen.pid, self.cpus)
        with _LIVE_LOCK:
            _LIVE.add(self)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def log_tail(self, lines: int = 40) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(size - 64 * 1024, 0))
                text = fh.read().decode(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def remaining(self) -> set[int]:
        """Pids of this server's tree that are still alive (empty when fully stopped)."""
        return set(self._live()) if self.popen is not None else set()

    def _live(self) -> dict[int, int]:
        """This tree's live processes (pid -> start time), remembered for later calls: the
        launched process's group and descendants, and those seen earlier (reparented to init
        once their parent died) that still have the start time they had then."""
        assert self.popen is not None
        live = _related(self.popen.pid, self._root_start)
        for pid, start in self._tracked.items():
            if pid not in live and _start_time(pid) == start:
                live[pid] = start
        self._tracked.update(live)
        return live

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole tree at once (tests use this to simulate a crash)."""
        if self.popen is None:
            return
        _signal_all(self.remaining(), sig)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the tree, wait up to grace_s, SIGKILL the rest, verify none is left."""
        if self.popen is None:
            return
        try:
            _signal_all(self.remaining(), signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                self.popen.poll()  # reap our direct child so it does not linger as a zombie
                if not self.remaining():
                    break
                time.sleep(0.1)
            left = self.remaining()
            if left:
                _signal_all(left, signal.SIGKILL)
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline and self.remaining():
                    self.popen.poll()
                    time.sleep(0.05)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5.0)
            survivors = self.remaining()
            if survivors:
                raise ProcessError(f"{self.name}: processes {sorted(survivors)} survived SIGKILL")
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)

    def __enter__(self) -> ManagedProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def live_processes() -> list[ManagedProcess]:
    with _LIVE_LOCK:
        return list(_LIVE)


def stop_all() -> None:
    """Stop every registered process (atexit and signal handlers call this)."""
    for proc in live_processes():
        with contextlib.suppress(ProcessError):
            proc.stop(grace_s=5.0)


def _on_terminate(signum: int, _frame: Any) -> None:
    # Raising unwinds `with` blocks in the main thread, which stop their servers in order;
    # stop_all() then catches anything those blocks did not own.
    stop_all()
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        # Respect a handler someone else installed (pytest, snakemake): only replace defaults.
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _on_terminate)
