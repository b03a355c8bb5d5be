"""A client that leaves mid-stream while the engine is silent: the proxy must close the
upstream connection at once (that is what makes vLLM abort the request and free its slot),
not at the engine's next chunk, which for a queued or stalled request may be long in coming.

The engine is a raw TCP server that sends one event and then nothing, and notes when the
proxy closes the connection: this tests the proxy's relay, not vLLM (the real-engine case is
`test_client_disconnect_cancels_the_engine_request` in tests/integration).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx

from .conftest import DroppingEngine, idle, records_of

EVENT = b'data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":" a"}]}\n\n'


class SilentStreamEngine(DroppingEngine):
    """Answers GETs like DroppingEngine; a POST gets stream headers and one event, then
    silence until the proxy closes the connection (`closed_at`, a time.monotonic())."""

    def __init__(self) -> None:
        self.closed_at: float | None = None
        super().__init__()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"POST"):
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(EVENT), EVENT)
                )
                await writer.drain()
                await reader.read()  # silence until the proxy hangs up (b"" at EOF)
                self.closed_at = time.monotonic()
            else:
                body = DroppingEngine.METRICS if b"/metrics" in head.split(b"\r\n")[0] else b""
                writer.write(
                    b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_at = time.monotonic()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def test_client_gone_closes_a_silent_upstream_at_once(proxy_over) -> None:
    engine = SilentStreamEngine()
    try:
        proxy, client = proxy_over([engine.url], upstream_timeout_s=60)
        body = {"prompt": [1, 2, 3, 4], "max_tokens": 100, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as r:
            assert next(r.iter_lines()).startswith("data: {")  # the stream has begun
            t_gone = time.monotonic()
        deadline = t_gone + 3.0
        while engine.closed_at is None:
            # Before the fix the relay noticed only at the next chunk, which never came: the
            # engine would have decoded (or held its queue slot) until the 60 s timeout.
            assert time.monotonic() < deadline, "upstream still open after the client left"
            time.sleep(0.01)
        assert engine.closed_at - t_gone < 3.0
        deadline = time.monotonic() + 3.0
        while not idle(proxy) or not records_of(proxy):
            assert time.monotonic() < deadline, "request still in flight in the proxy"
            time.sleep(0.01)
        assert [r["error"] for r in records_of(proxy)] == ["client disconnected"]
        # Leaving is the client's doing: the engine stays in service.
        assert all(i.healthy for i in proxy.app.state.instances)
        assert httpx.get(proxy.url + "/health").json()["engines"][0]["healthy"] is True
    finally:
        engine.stop()
