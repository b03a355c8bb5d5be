"""The other servers a real run starts: the routing proxy (`akvc proxy`) and `redis-server`.

Both run as managed child processes (own process group, log file, verified stop), so the
proxy's event loop never competes with the replayer's in one interpreter.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentic_kvc.serve.ports import LOOPBACK, DiedWhileWaiting, HealthTimeout, free_port
from agentic_kvc.serve.ports import wait_http_ok as _wait_http_ok
from agentic_kvc.serve.procs import ManagedProcess, ProcessError


class ServiceError(ProcessError):
    pass


class _Service:
    """A ManagedProcess plus a URL/port; subclasses say how to start and probe it."""

    name = "service"

    def __init__(self, log_dir: Path, startup_timeout_s: float) -> None:
        self.log_dir = Path(log_dir)
        self.startup_timeout_s = startup_timeout_s
        self.port = free_port()
        self.proc: ManagedProcess | None = None
        self.startup_s: float | None = None
        self.cpus: list[int] | None = None  # CPU affinity; None: any core

    def argv(self) -> list[str]:
        raise NotImplementedError

    def _wait_ready(self) -> float:
        raise NotImplementedError

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def start(self) -> _Service:
        self.proc = ManagedProcess(self.name, self.argv(), self.log_path, cpus=self.cpus).start()
        try:
            self.startup_s = round(self._wait_ready(), 2)
        except (DiedWhileWaiting, HealthTimeout) as exc:
            tail = self.proc.log_tail()
            self.stop()
            raise ServiceError(f"{self.name}: {exc}; log {self.log_path}:\n{tail}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def describe(self) -> dict[str, Any]:
        return {
            "argv": self.proc.argv if self.proc else self.argv(),
            "port": self.port,
            "log": str(self.log_path),
            "startup_s": self.startup_s,
            "cpus": self.cpus,
        }

    def __enter__(self) -> _Service:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class ProxyProcess(_Service):
    """`akvc proxy` in front of `engines` (vLLM base URLs), listening on a free loopback port."""

    name = "proxy"

    def __init__(
        self,
        engines: Sequence[str],
        policy: str,
        log_dir: Path,
        params: Mapping[str, Any] | None = None,
        records: Path | None = None,
        extra_args: Sequence[str] = (),
        log_level: str = "warning",
        startup_timeout_s: float = 60.0,
        cpus: Sequence[int] | None = None,
    ) -> None:
        super().__init__(log_dir, startup_timeout_s)
        self.cpus = list(cpus) if cpus else None
        if not engines:
            raise ValueError("the proxy needs at least one engine URL")
        self.engines = list(engines)
        self.policy = policy
        self.params = dict(params or {})
        self.records = records
        self.extra_args = list(extra_args)
        self.log_level = log_level

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "agentic_kvc.cli", "proxy", "--host", LOOPBACK]
        argv += ["--port", str(self.port), "--policy", self.policy, "--log-level", self.log_level]
        for url in self.engines:
            argv += ["--engine", url]
        for key, value in sorted(self.params.items()):
            # The proxy reads VALUE as YAML; JSON is valid YAML and keeps lists and floats.
            argv += ["--param", f"{key}={json.dumps(value)}"]
        if self.records is not None:
            argv += ["--records", str(self.records)]
        return argv + self.extra_args

    def _wait_ready(self) -> float:
        assert self.proc is not None
        return _wait_http_ok(self.url + "/health", self.startup_timeout_s, self.proc.alive, 0.2)


def redis_available() -> str | None:
    return shutil.which("redis-server")


class RedisServer(_Service):
    """A throwaway `redis-server` on loopback: no persistence, nothing written to disk."""

    name = "redis"

    def __init__(self, log_dir: Path, startup_timeout_s: float = 20.0) -> None:
        binary = redis_available()
        if binary is None:
            raise ServiceError(
                "redis-server not found; install the Debian package: apt-get install redis-server"
            )
        self.binary = binary
        super().__init__(log_dir, startup_timeout_s)

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}"

    def argv(self) -> list[str]:
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            LOOPBACK,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",  # a daemon would leave our process group and escape stop()
        ]

    def ping(self, timeout_s: float = 1.0) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=timeout_s) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def _wait_ready(self) -> float:
        assert self.proc is not None
        t0 = time.monotonic()
        while not self.ping():
            if not self.proc.alive():
                raise DiedWhileWaiting("redis-server exited while starting")
            if time.monotonic() - t0 > self.startup_timeout_s:
                raise HealthTimeout(f"redis-server not answering after {self.startup_timeout_s} s")
            time.sleep(0.1)
        return time.monotonic() - t0
