"""The proxy's HTTP/1.1 client to its engines: keep-alive pools on asyncio + httptools.

Why not aiohttp: every relayed request paid for aiohttp's general machinery (request and
response objects, header multidicts, timers, a stream reader, payload writers), about half of
the proxy's CPU per request, measured with `benchmarks/proxy_overhead.py`. The proxy needs
little of it: a POST or GET to a known engine over plain TCP, the status and two headers,
and the body either whole or chunk by chunk as it arrives. This client does that and nothing
more: one `transport.write` per request, httptools (the C parser uvicorn uses) for the answer,
one wake-up of the reader per socket read.

Errors say what a router needs to know:
- `UpstreamRefused`: the request never reached the engine (refused, unreachable, connect
  timeout), so another engine may take it;
- `UpstreamDropped`: the connection ended before the response did (the engine died, reset, or
  sent bytes that are not HTTP);
- `TimeoutError`: the request's own deadline passed.
Both upstream errors are `ConnectionError`s. A keep-alive connection the engine closed while it
sat idle is not an error: the request is re-sent once on a fresh connection, as it never
reached the engine.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import Callable

import httptools

_PAUSE_BYTES = 1 << 20  # stop reading from an engine whose client is this far behind


class UpstreamError(ConnectionError):
    """An engine refused or dropped the request."""


class UpstreamRefused(UpstreamError):
    """The request never reached the engine: safe to send it elsewhere."""


class UpstreamDropped(UpstreamError):
    """The connection ended before the response was complete."""


class UpstreamAbandoned(Exception):
    """The proxy gave up on a response because its client left: not the engine's fault, so
    deliberately not an `UpstreamError`."""


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before any answer."""


class UpstreamResponse:
    """One response: `status`, `headers` (lower-case names), then `next_chunk()` or `read()`.

    Call `release()` when done with a fully read response (its connection goes back to the
    pool) or `close()` to drop the connection (a half-read or failed response).
    """

    __slots__ = (
        "_buf",
        "_buffered",
        "_conn",
        "_deadline",
        "_error",
        "_headers_done",
        "_loop",
        "_waiter",
        "_whole",
        "complete",
        "headers",
        "status",
    )

    def __init__(self, conn: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.status = 0
        self._loop = loop
        self.headers: dict[bytes, bytes] = {}
        self.complete = False
        self._conn: _Connection | None = conn
        self._buf: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._headers_done = False
        self._deadline: asyncio.TimerHandle | None = None
        self._whole = False  # read(): wake the reader only at the body's end (or an error)

    # ---- reading -----------------------------------------------------------------------

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        # The connection's loop, not asyncio.get_running_loop(): that one makes a getpid()
        # system call every time, and a stream waits once per socket read.
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def _take(self) -> bytes:
        data = self._buf.popleft() if len(self._buf) == 1 else b"".join(self._buf)
        self._buf.clear()
        self._buffered = 0
        conn = self._conn
        if conn is not None and conn.paused:
            conn.resume()
        return data

    def has_data(self) -> bool:
        """Body bytes (or its end) are here: `next_chunk()` will not wait."""
        return bool(self._buf) or self.complete

    async def next_chunk(self) -> bytes:
        """The body as it arrives: everything received since the last call; b"" at its end."""
        while not self._buf:
            if self.complete:
                return b""
            await self._wait()
        return self._take()

    async def read(self) -> bytes:
        """The whole body. Reading is not paused at `_PAUSE_BYTES` for it (it takes nothing
        before the end, so a larger body used to stall until the deadline), and its task is
        woken at the end, not at every socket read."""
        self._whole = True
        conn = self._conn
        if conn is not None and conn.paused:
            conn.resume()
        while not self.complete:
            await self._wait()
        return self._take() if self._buf else b""

    # ---- ending ------------------------------------------------------------------------

    def release(self) -> None:
        """Done with a response: keep its connection for the next request if it can be."""
        conn, self._conn = self._conn, None
        self._cancel_deadline()
        if conn is None:
            return
        if self.complete and self._error is None and conn.reusable():
            conn.park()
        else:
            conn.close()

    def abandon(self) -> None:
        """Wake a reader waiting for the next chunk with `UpstreamAbandoned` (its client has
        gone); the reader then closes the response."""
        self._fail(UpstreamAbandoned("the client disconnected"))

    def close(self) -> None:
        """Drop the connection (a response abandoned half-read must not be reused)."""
        conn, self._conn = self._conn, None
        self._cancel_deadline()
        if conn is not None:
            conn.close()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # ---- fed by the connection ---------------------------------------------------------

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._wake()

    def _on_timeout(self) -> None:
        self._deadline = None
        self._fail(TimeoutError("upstream request timed out"))
        self.close()


def _delimited_by_close(resp: UpstreamResponse) -> bool:
    h = resp.headers
    return resp._headers_done and b"content-length" not in h and b"transfer-encoding" not in h


class _Connection(asyncio.Protocol):
    """One TCP connection to an engine, parked in its pool between requests."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.resp: UpstreamResponse | None = None
        self.lost = False
        self.paused = False
        self.began = False  # the current response has sent its first byte
        self.keep_alive = True
        self.served = 0  # responses completed on this connection

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        resp = self.resp
        if resp is None:  # bytes while idle: the connection is not in a state to reuse
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            resp._fail(UpstreamDropped(f"{self.pool.url}: malformed HTTP response: {exc}"))
            self.close()
            return
        if resp._whole:
            if resp.complete:
                resp._wake()
            return
        if resp._buffered > _PAUSE_BYTES and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        resp._wake()  # once per socket read, however many parser events it held

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.pool._forget(self)
        resp = self.resp
        if resp is not None and not resp.complete and _delimited_by_close(resp):
            resp.complete = True  # a body without length or chunking ends with the connection
            resp._wake()
        elif resp is not None and not resp.complete:
            if not self.began and self.served > 0:
                resp._fail(_StaleConnection())
            else:
                why = f": {exc}" if exc else ""
                resp._fail(UpstreamDropped(f"{self.pool.url} closed the connection{why}"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.began = True

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.resp is not None
        self.resp.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        resp = self.resp
        assert resp is not None
        resp.status = self.parser.get_status_code()
        resp._headers_done = True
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        resp = self.resp
        assert resp is not None
        resp._buf.append(body)
        resp._buffered += len(body)

    def on_message_complete(self) -> None:
        assert self.resp is not None
        self.resp.complete = True

    # pool side
    def reusable(self) -> bool:
        return self.keep_alive and not self.lost and self.transport is not None

    def park(self) -> None:
        self.served += 1
        if self.paused:  # a released response may not have been read to the end
            self.resume()
        self.resp = None
        self.began = False
        self.parser = httptools.HttpResponseParser(self)
        self.pool._park(self)

    def resume(self) -> None:
        self.paused = False
        if self.transport is not None and not self.lost:
            self.transport.resume_reading()

    def close(self) -> None:
        self.lost = True
        self.pool._forget(self)
        if self.transport is not None:
            self.transport.close()


DEFAULT_MAX_IDLE = 128  # per engine; twice the overhead benchmark's whole concurrency


class UpstreamPool:
    """Keep-alive connections to one engine (`http://host:port`), no limit on how many are
    busy (the engine queues, the proxy must not add a second queue in front of it), but at
    most `max_idle` kept idle: after a burst of 1,000 streams the pool used to hold 1,000
    idle sockets (and fds) for good; past the cap a finished connection is closed instead."""

    def __init__(
        self, url: str, connect_timeout_s: float = 3.0, max_idle: int = DEFAULT_MAX_IDLE
    ) -> None:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https"):
            raise ValueError(f"engine URL must be http(s)://host[:port], got {url!r}")
        hostport = rest.split("/", 1)[0]
        host, colon, port = hostport.rpartition(":")
        if not colon or not port.isdigit() or host.endswith(":"):  # no port (IPv6 w/o port too)
            host, port = hostport, "443" if scheme == "https" else "80"
        self.url = url.rstrip("/")
        self.host, self.port = host.strip("[]"), int(port)
        self.ssl = ssl.create_default_context() if scheme == "https" else None
        self.connect_timeout_s = connect_timeout_s
        if max_idle < 0:
            raise ValueError(f"max_idle must be >= 0, got {max_idle}")
        self.max_idle = max_idle
        self._host_header = hostport.encode()
        self._idle: list[_Connection] = []
        self._live: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of its first request
        self.closed = False

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> UpstreamResponse:
        """Send one request; return once the response's status and headers are in.

        `on_sent` is called once: right after the request is written to a pooled connection
        (so the caller's bookkeeping runs while the engine works, not before it starts), or
        before the first wait when a connection must be opened, and so always before this
        returns or raises and before another task can run."""
        head = [f"{method} {path} HTTP/1.1\r\nhost: ".encode(), self._host_header]
        if body or method == "POST":
            head.append(b"\r\ncontent-length: " + str(len(body)).encode())
        for k, v in (headers or {}).items():
            head.append(f"\r\n{k}: {v}".encode("latin-1"))
        head.append(b"\r\n\r\n")
        data = b"".join(head) + body
        loop = self._loop
        if loop is None:  # (asyncio.get_running_loop() costs a getpid() system call)
            loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s is not None else None
        for attempt in range(2):
            conn = self._idle_connection() if attempt == 0 else None
            if conn is None:
                if on_sent is not None:
                    on_sent()
                    on_sent = None
                conn = await self._connect(deadline)
            resp = UpstreamResponse(conn, loop)
            conn.resp = resp
            if deadline is not None:
                resp._deadline = loop.call_at(deadline, resp._on_timeout)
            assert conn.transport is not None
            conn.transport.write(data)
            if on_sent is not None:
                on_sent()
                on_sent = None
            try:
                while not resp._headers_done:
                    await resp._wait()
            except _StaleConnection:
                resp.close()
                continue  # it never reached the engine: once more on a fresh connection
            except BaseException:
                resp.close()
                raise
            return resp
        raise UpstreamDropped(f"{self.url} closed two connections before answering")

    async def fetch(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, bytes]:
        """One request whose whole answer is wanted at once: (status, body)."""
        resp = await self.request(method, path, body, headers, timeout_s)
        try:
            data = await resp.read()
        except BaseException:
            resp.close()
            raise
        resp.release()
        return resp.status, data

    async def get(self, path: str, timeout_s: float) -> tuple[int, bytes]:
        """GET a small document (metrics, health, models): (status, body)."""
        return await self.fetch("GET", path, timeout_s=timeout_s)

    def _idle_connection(self) -> _Connection | None:
        """A pooled connection still open, or None (then `_connect` opens one)."""
        while self._idle and not self.closed:
            conn = self._idle.pop()
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self, deadline: float | None) -> _Connection:
        if self.closed:
            raise UpstreamRefused(f"{self.url}: client closed")
        loop = asyncio.get_running_loop()
        timeout = self.connect_timeout_s
        if deadline is not None:
            timeout = min(timeout, max(deadline - loop.time(), 0.0))
        try:
            async with asyncio.timeout(timeout):
                _, proto = await loop.create_connection(
                    lambda: _Connection(self), self.host, self.port, ssl=self.ssl
                )
        except TimeoutError as exc:
            raise UpstreamRefused(f"{self.url}: connect timed out after {timeout:.1f}s") from exc
        except OSError as exc:
            raise UpstreamRefused(f"{self.url}: cannot connect: {exc}") from exc
        self._live.add(proto)
        return proto

    def _park(self, conn: _Connection) -> None:
        if self.closed or len(self._idle) >= self.max_idle:
            conn.close()
        else:
            self._idle.append(conn)

    def _forget(self, conn: _Connection) -> None:
        self._live.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)

    def retire(self) -> None:
        """Stop lending connections: close the idle ones now, each busy one when its response
        is done. Requests in flight finish normally (only `close` cuts them)."""
        self.closed = True
        for conn in list(self._idle):
            conn.close()
        self._idle.clear()

    def close(self) -> None:
        """Close every connection, idle or busy (pending requests fail as dropped)."""
        self.closed = True
        for conn in list(self._live):
            conn.close()
        self._idle.clear()
