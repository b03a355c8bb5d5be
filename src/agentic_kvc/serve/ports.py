"""Free loopback ports and health waits shared by every launched server."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

LOOPBACK = "127.0.0.1"
_HANDED_OUT: set[int] = set()
_LOCK = threading.Lock()


# Servers get ports below the kernel's ephemeral range. A port picked by binding port 0 comes
# from that range, and so do the ports the kernel hands every outgoing connection and every
# other bind to port 0 (vLLM's internal ZMQ sockets among them): between our pick and the
# server's bind, an engine starting meanwhile could take it. That happened to a NIXL side
# channel port (2026-11-30, "Address already in use", results/archive/
# real_cpu_pd_quiet_campaign/README.md). Below the range only an explicit bind can collide.
_SERVER_PORTS_LOW = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_RANDOM = random.Random()  # seeded from the OS: two processes do not walk the same ports


def _server_port_range() -> tuple[int, int] | None:
    """Ports from 10000 up to the ephemeral range's start, or None where that leaves too few
    (or the range is unknown: not Linux)."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if low - _SERVER_PORTS_LOW < 1000:
        return None
    return _SERVER_PORTS_LOW, low - 1


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody holds now, never handed out twice by this process.

    Taken at random below the ephemeral range where there is room (see above), else from the
    kernel. Another process may still bind it before our server does (other engineers'
    servers run on this machine too), so a launch that fails to bind is reported with the
    server's log rather than retried silently.
    """
    span = _server_port_range()
    with _LOCK:
        for _ in range(100):
            port = _RANDOM.randint(*span) if span is not None else _kernel_port(host)
            if port not in _HANDED_OUT and (span is None or _bindable(host, port)):
                _HANDED_OUT.add(port)
                return port
    raise RuntimeError("no free port found after 100 tries")


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class HealthTimeout(RuntimeError):
    pass


class DiedWhileWaiting(RuntimeError):
    pass


def wait_http_ok(
    url: str,
    timeout_s: float,
    alive: Callable[[], bool],
    interval_s: float = 0.5,
) -> float:
    """Poll GET url until 200; return seconds waited.

    `alive()` is checked between polls so that a server that crashed fails the wait at once
    instead of after the whole timeout.
    """
    t0 = time.monotonic()
    with httpx.Client(timeout=2.0) as client:
        while True:
            if not alive():
                raise DiedWhileWaiting(f"process exited before {url} answered")
            try:
                if client.get(url).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise HealthTimeout(f"{url} did not answer 200 within {timeout_s:.0f} s")
            time.sleep(interval_s)
