"""The proxy's upstream HTTP client against raw TCP servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from agentic_kvc.proxy.upstream import UpstreamDropped, UpstreamPool, UpstreamRefused

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(head, body) of one request with a content-length (or none)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n" % (len(body), extra) + body


class Server:
    """A TCP server running `handler(reader, writer, connection_number)` per connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(r, w, self.connections)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                w.close()

        self.server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


async def keep_alive(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
    while True:
        _head, body = await read_request(r)
        w.write(ok(b"echo:" + body))
        await w.drain()


def test_content_length_response_and_connection_reuse() -> None:
    async def main() -> None:
        async with Server(keep_alive) as srv:
            pool = UpstreamPool(srv.url)
            for i in range(3):
                resp = await pool.request("POST", "/x", b"%d" % i, {"content-type": "a/b"}, 5)
                assert resp.status == 200
                assert await resp.read() == b"echo:%d" % i
                resp.release()
            assert srv.connections == 1
            pool.close()

    asyncio.run(main())


def test_chunked_body_arrives_step_by_step() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        w.write(b"transfer-encoding: chunked\r\n\r\n")
        for part in (b"data: 1\n\n", b"data: 2\n\n"):
            w.write(b"%x\r\n%s\r\n" % (len(part), part))
            await w.drain()
            await asyncio.sleep(0.05)
        w.write(b"0\r\n\r\n")
        await w.drain()
        await r.read()

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("POST", "/s", b"{}", None, 5)
            assert resp.headers[b"content-type"] == b"text/event-stream"
            got = []
            while chunk := await resp.next_chunk():
                got.append(chunk)
            assert got == [b"data: 1\n\n", b"data: 2\n\n"]  # not glued: they came apart
            assert resp.complete
            resp.release()
            assert len(pool._idle) == 1
            pool.close()

    asyncio.run(main())


def test_idle_connection_closed_by_server_is_replaced_silently() -> None:
    async def one_then_close(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(ok(b"hi"))
        await w.drain()
        # Close while the client holds the connection idle, without `connection: close`.

    async def main() -> None:
        async with Server(one_then_close) as srv:
            pool = UpstreamPool(srv.url)
            for _ in range(3):
                resp = await pool.request("GET", "/a", timeout_s=5)
                assert await resp.read() == b"hi"
                resp.release()
            assert srv.connections == 3
            pool.close()

    asyncio.run(main())


def test_request_sent_on_a_connection_closed_in_flight_is_retried_once() -> None:
    # The pool hands out a parked connection the server has just closed (its FIN not yet
    # seen): the request gets no byte back, so it is re-sent on a fresh connection, not on
    # another parked one (which may have timed out the same way).
    async def main() -> None:
        async with Server(keep_alive) as srv:
            pool = UpstreamPool(srv.url)
            first = await asyncio.gather(*(pool.request("GET", "/a", timeout_s=5) for _ in "ab"))
            for resp in first:
                await resp.read()
                resp.release()
            assert len(pool._idle) == 2
            for parked in pool._idle:
                assert parked.transport is not None
                # The race: the server's close arrives right after the request is written.
                parked.transport.write = lambda data, c=parked: c.connection_lost(None)  # type: ignore[method-assign]
            resp = await pool.request("GET", "/b", timeout_s=5)
            assert await resp.read() == b"echo:"
            resp.release()
            assert srv.connections == 3
            pool.close()

    asyncio.run(main())


def test_refused_connection() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connect is refused

        async def main() -> None:
            pool = UpstreamPool(f"http://127.0.0.1:{port}")
            with pytest.raises(UpstreamRefused, match="cannot connect"):
                await pool.request("GET", "/health", timeout_s=5)

        asyncio.run(main())


def test_dropped_mid_body_and_before_any_byte() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        if n == 1:
            w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await w.drain()
            await asyncio.sleep(0.05)
        # connection 2: closed with no answer at all

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("POST", "/s", b"{}", None, 5)
            assert await resp.next_chunk() == b"hello"
            with pytest.raises(UpstreamDropped, match="closed the connection"):
                await resp.next_chunk()
            resp.close()
            with pytest.raises(UpstreamDropped):  # a fresh connection: not retried
                await pool.request("POST", "/s", b"{}", None, 5)
            assert srv.connections == 2
            pool.close()

    asyncio.run(main())


def test_deadline_covers_headers_and_body() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        if n == 2:
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            await w.drain()
        await asyncio.sleep(10)

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(TimeoutError):
                await pool.request("GET", "/slow", timeout_s=0.2)
            resp = await pool.request("GET", "/slow-body", timeout_s=0.2)
            with pytest.raises(TimeoutError):
                await resp.read()
            assert loop.time() - t0 < 2.0
            assert not pool._idle  # neither connection can be reused
            pool.close()

    asyncio.run(main())


def test_connection_close_and_malformed_responses_are_not_reused() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        if n == 1:
            w.write(ok(b"bye", b"connection: close\r\n"))
        else:
            w.write(b"NOT HTTP AT ALL\r\n\r\n")
        await w.drain()
        await asyncio.sleep(0.1)

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            status, body = await pool.get("/a", 5)
            assert (status, body) == (200, b"bye")
            assert not pool._idle
            with pytest.raises(UpstreamDropped, match="malformed"):
                await pool.get("/b", 5)
            pool.close()

    asyncio.run(main())


def test_large_body_pauses_reading_and_arrives_intact() -> None:
    payload = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MB: over the pause threshold

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(ok(payload))
        await w.drain()
        await asyncio.sleep(0.5)

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("GET", "/big", timeout_s=10)
            await asyncio.sleep(0.3)  # let the socket fill the buffer past the threshold
            conn = resp._conn
            assert conn is not None and conn.paused
            parts = []
            while chunk := await resp.next_chunk():
                parts.append(chunk)
            assert b"".join(parts) == payload
            resp.release()
            pool.close()

    asyncio.run(main())


def test_connection_released_while_paused_reads_the_next_answer() -> None:
    payload = b"x" * (2 * 1024 * 1024)

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(ok(payload))
        await w.drain()
        await read_request(r)
        w.write(ok(b"second"))
        await w.drain()
        await asyncio.sleep(0.5)

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("GET", "/big", timeout_s=10)
            while not resp.complete:  # let it all arrive without reading it
                await asyncio.sleep(0.05)
                conn = resp._conn
                assert conn is not None
                if conn.paused:
                    conn.resume()  # what a reader would do; then stop reading again
            resp._conn.paused = True  # type: ignore[union-attr]
            resp._conn.transport.pause_reading()  # type: ignore[union-attr]
            resp.release()  # complete, keep-alive: parked, and must read again
            assert await pool.get("/again", 5) == (200, b"second")
            assert srv.connections == 1
            pool.close()

    asyncio.run(main())


def test_body_delimited_by_connection_close() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end")
        await w.drain()

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            assert await pool.get("/x", 5) == (200, b"until the end")
            assert not pool._idle
            pool.close()

    asyncio.run(main())


def test_bad_urls() -> None:
    with pytest.raises(ValueError, match="http"):
        UpstreamPool("ftp://x:1")
    assert UpstreamPool("https://example.org").port == 443
    assert UpstreamPool("http://[::1]:8080").host == "::1"


def test_large_body_read_whole_does_not_stall_at_the_pause() -> None:
    """`read()` waits for the end of a body larger than the pause threshold: reading must go
    on, or the answer only ends at the deadline (a non-streamed response over 1 MB did)."""
    payload = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MB

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(payload))
        for i in range(0, len(payload), 65536):  # in pieces, as a server writes a big body
            w.write(payload[i : i + 65536])
            await w.drain()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.5)

    async def main() -> None:
        async with Server(handler) as srv:
            pool = UpstreamPool(srv.url)
            resp = await pool.request("GET", "/big", timeout_s=5)
            assert await resp.read() == payload
            resp.release()
            pool.close()

    asyncio.run(main())


def test_on_sent_runs_once_after_the_write_or_before_a_connect_and_before_any_other_task() -> None:
    # The proxy admits a request in `on_sent`: it must run before the request can wait (or
    # fail), so that no other request is routed without seeing it, and after the write when
    # a pooled connection lets it go out at once.
    async def main() -> None:
        async with Server(keep_alive) as srv:
            pool = UpstreamPool(srv.url)
            events: list[str] = []
            other_task_ran: list[bool] = []

            def on_sent() -> None:
                events.append(f"sent, {len(pool._live)} connection(s)")
                other_task_ran.append(flag.is_set())

            async def send(path: str) -> None:
                flag.clear()
                asyncio.get_running_loop().call_soon(flag.set)  # runs at the first wait
                resp = await pool.request("GET", path, timeout_s=5, on_sent=on_sent)
                assert await resp.read() == b"echo:"
                resp.release()

            flag = asyncio.Event()
            await send("/first")  # no pooled connection: before the connect
            assert events == ["sent, 0 connection(s)"]
            (parked,) = pool._idle
            assert parked.transport is not None
            write = parked.transport.write
            parked.transport.write = lambda data: (events.append("write"), write(data))  # type: ignore[method-assign, func-returns-value]
            await send("/second")  # pooled: right after the write
            assert events[1:] == ["write", "sent, 1 connection(s)"]
            assert other_task_ran == [False, False]
            pool.close()

    asyncio.run(main())


def test_on_sent_runs_before_a_refused_connect_raises() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connect is refused
        calls: list[int] = []

        async def main() -> None:
            pool = UpstreamPool(f"http://127.0.0.1:{port}")
            with pytest.raises(UpstreamRefused):
                await pool.request("GET", "/health", timeout_s=5, on_sent=lambda: calls.append(1))

        asyncio.run(main())
        assert calls == [1]
