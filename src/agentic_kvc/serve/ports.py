"""Free loopback ports and health waits shared by every launched server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import httpx

LOOPBACK = "127.0.0.1"
_HANDED_OUT: set[int] = set()
_LOCK = threading.Lock()


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on now, never handed out twice by this process.

    The OS may still give the port to someone else before our server binds it; other
    engineers' servers run on this machine too, so a launch that fails to bind is reported
    with the server's log rather than retried silently.
    """
    with _LOCK:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
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
