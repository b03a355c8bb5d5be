"""Serving the proxy app: blocking (the CLI) or in a background thread (tests, run backend).

uvicorn with uvloop and the httptools parser when installed (the fastest pure-Python-facing
HTTP/1.1 stack here); access logs, `server` and `date` headers are off because each costs
time on every request and nothing reads them, and so is uvicorn's X-Forwarded-For middleware
(`proxy_headers`), an extra ASGI layer per request whose client address nothing reads.

One addition to uvicorn's httptools protocol (`HoldingHttpToolsProtocol`): an app may ask, with
`HOLD_HEADERS` in its `http.response.start` message, that the status line and headers go out
with the first body bytes, in one socket write, instead of on their own. uvicorn writes them at
once (uvloop writes on every `transport.write`), which costs a non-streamed response two writes
and its client two reads where one will do. Other servers ignore the key, and so does a
uvicorn release the subclass was not tested against (`HOLDING_TESTED_UVICORN`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from agentic_kvc.proxy.app import HOLD_HEADERS, ProxyApp, create_app
from agentic_kvc.proxy.settings import ProxySettings
from agentic_kvc.security import warn_if_exposed


def _loop_impl() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def _http_impl() -> str:
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


class ListenError(OSError):
    """The address to listen on cannot be bound (in use, not this host's, not permitted)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving, so port 0 yields a known free port with no race. ListenError,
    naming the address, if it cannot be bound."""
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        # A vLLM engine's default port is 8000 too, so "in use" is the common case.
        hint = " (pick another --port, or 0 for a free one)" if port else ""
        raise ListenError(f"cannot listen on {host}:{port}: {why}{hint}") from exc
    sock.set_inheritable(True)
    return sock


__all__ = [
    "HOLD_HEADERS",
    "ListenError",
    "ProxyThread",
    "ServerThread",
    "proxy_running",
    "run_proxy",
]


class _HeldHead:
    """Stands in for the transport while uvicorn writes a held response's head."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class _HeadFirst:
    """Stands in for the transport while uvicorn writes the first body message: the held head
    goes out in front of the first write; everything else goes to the real transport."""

    __slots__ = ("head", "transport")

    def __init__(self, transport: Any, head: bytes) -> None:
        self.transport, self.head = transport, head

    def write(self, data: bytes) -> None:
        head, self.head = self.head, b""
        self.transport.write(head + data if head else data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def flush(self) -> None:
        if self.head and not self.transport.is_closing():
            self.transport.write(self.head)
        self.head = b""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def _holding_cycle_class() -> type:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    class HoldingCycle(RequestResponseCycle):
        """uvicorn's request/response cycle that can write the head with the first body."""

        _held: bytes | None = None

        async def send(self, message: Any) -> None:
            held = self._held
            if held is not None:
                self._held = None
                transport = self.transport
                stand_in = _HeadFirst(transport, held)
                self.transport = stand_in  # type: ignore[assignment]
                try:
                    await super().send(message)
                finally:
                    self.transport = transport
                    if not self.disconnected:
                        stand_in.flush()  # no body bytes written (HEAD, an empty message)
                return
            if message.get(HOLD_HEADERS) and not self.response_started:
                transport = self.transport
                head = _HeldHead()
                self.transport = head  # type: ignore[assignment]
                try:
                    await super().send(message)
                finally:
                    self.transport = transport
                if head.data:
                    self._held = head.data
                return
            await super().send(message)

    return HoldingCycle


def _holding_protocol_class() -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    cycle_class = _holding_cycle_class()

    class HoldingHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol whose request cycles can hold a response's head."""

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and type(cycle) is not cycle_class:
                # The cycle was made (and its task created, not yet run) by uvicorn's own
                # method; it becomes the subclass before the app sees its `send`.
                cycle.__class__ = cycle_class

    return HoldingHttpToolsProtocol


# The uvicorn releases whose httptools protocol and request cycle the holding subclasses were
# tested against (they override `on_headers_complete` and `send` and swap the cycle's
# `transport`, which are uvicorn internals): any other release serves with its own protocol,
# correct, one write slower per non-streamed response.
HOLDING_TESTED_UVICORN = ((0, 54),)


def holding_supported(version: str = uvicorn.__version__) -> bool:
    """Whether this uvicorn release is one the head-holding protocol was tested against."""
    try:
        major_minor = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return False
    return major_minor in HOLDING_TESTED_UVICORN


def _http_protocol() -> Any:
    if _http_impl() != "httptools":
        return "h11"
    return _holding_protocol_class() if holding_supported() else "httptools"


def uvicorn_config(app: ProxyApp, log_level: str = "warning") -> uvicorn.Config:
    return uvicorn.Config(
        app,
        loop=_loop_impl(),
        http=_http_protocol(),
        lifespan="on",
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,
        log_level=log_level,
        timeout_keep_alive=75,
        backlog=4096,
    )


def run_proxy(settings: ProxySettings, log_level: str = "info") -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM); records are flushed on the way out."""
    sock = bind_socket(settings.host, settings.port)  # first: a taken port fails at once
    try:
        app = create_app(settings)
    except BaseException:
        sock.close()
        raise
    warn_if_exposed(settings.host, "the proxy")
    host, port = sock.getsockname()[:2]
    print(f"akvc proxy: policy {settings.policy} on http://{host}:{port}", flush=True)
    server = uvicorn.Server(uvicorn_config(app, log_level))
    server.run(sockets=[sock])


class ServerThread:
    """Any ASGI app served by uvicorn from a daemon thread with its own event loop.

    `url` is known as soon as the constructor returns (the socket is bound there); `start()`
    waits until the app's startup has finished. Use as a context manager so it always stops.
    """

    def __init__(self, app: object, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self._sock = bind_socket(host, port)
        bound_host, bound_port = self._sock.getsockname()[:2]
        self.port = int(bound_port)
        self.url = f"http://{bound_host}:{bound_port}"
        self._server = uvicorn.Server(uvicorn_config(app))  # type: ignore[arg-type]
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._run, name="akvc-server", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            if _loop_impl() == "uvloop":
                import uvloop

                uvloop.run(self._server.serve(sockets=[self._sock]))
            else:
                asyncio.run(self._server.serve(sockets=[self._sock]))
        except BaseException as exc:
            self.error = exc

    def start(self, timeout_s: float = 30.0) -> ServerThread:
        self._thread.start()
        tick = threading.Event()
        for _ in range(int(timeout_s / 0.01)):
            if self._server.started or self.error is not None or not self._thread.is_alive():
                break
            tick.wait(0.01)
        if not self._server.started:
            self.stop()
            raise RuntimeError(f"server did not start: {self.error!r}")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProxyThread(ServerThread):
    """The proxy in a background thread; `.app` is the live ProxyApp (state, records)."""

    app: ProxyApp

    def __init__(self, settings: ProxySettings) -> None:
        super().__init__(create_app(settings), settings.host, settings.port)


@contextlib.contextmanager
def proxy_running(settings: ProxySettings) -> Iterator[ProxyThread]:
    with ProxyThread(settings) as proxy:
        yield proxy
