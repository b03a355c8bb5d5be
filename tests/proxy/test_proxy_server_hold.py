"""The proxy's server writes a held response head together with the first body bytes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agentic_kvc.proxy.asgi import run_lifespan
from agentic_kvc.proxy.server import HOLD_HEADERS, ServerThread, _http_impl, holding_supported

pytestmark = pytest.mark.skipif(
    _http_impl() != "httptools" or not holding_supported(),
    reason="needs httptools and a uvicorn release the holding protocol was tested against",
)

PAUSE_S = 0.4


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """`/hold`, `/plain`: head, a pause, then the body. `/stream-hold`: held head, a pause,
    an empty body message, a pause, then an event. `/head-only`: held head, empty body."""
    if scope["type"] == "lifespan":
        await run_lifespan(receive, send)
        return
    path = scope["path"]
    await receive()
    if path == "/stream-hold":
        start = {"type": "http.response.start", "status": 200, "headers": [], HOLD_HEADERS: True}
        await send(start)
        await asyncio.sleep(PAUSE_S)
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await asyncio.sleep(PAUSE_S)
        await send({"type": "http.response.body", "body": b"data: x\n\n", "more_body": False})
        return
    body = b"" if path == "/head-only" else b"hello"
    headers = [(b"content-length", str(len(body)).encode())]
    start = {"type": "http.response.start", "status": 200, "headers": headers}
    if path != "/plain":
        start[HOLD_HEADERS] = True
    await send(start)
    await asyncio.sleep(PAUSE_S if path in ("/hold", "/plain") else 0)
    await send({"type": "http.response.body", "body": body, "more_body": False})


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(app) as srv:
        yield srv


def _request(srv: ServerThread, path: str, version: str = "1.1", method: str = "GET") -> Any:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    sock.sendall(f"{method} {path} HTTP/{version}\r\nhost: x\r\n\r\n".encode())
    return sock


def _early(sock: socket.socket) -> bytes:
    """What arrives in the first half of the app's pause."""
    sock.settimeout(PAUSE_S / 2)
    try:
        return sock.recv(65536)
    except TimeoutError:
        return b""


def _rest(sock: socket.socket, until: bytes) -> bytes:
    sock.settimeout(5)
    data = b""
    while not data.endswith(until):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_held_head_goes_out_with_the_body(server: ServerThread) -> None:
    sock = _request(server, "/hold")
    assert _early(sock) == b""  # nothing before the body: the head waited for it
    data = _rest(sock, b"hello")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\nhello")
    sock.close()


def test_unheld_head_goes_out_at_once(server: ServerThread) -> None:
    sock = _request(server, "/plain")
    assert _early(sock).startswith(b"HTTP/1.1 200 OK\r\n")  # the control: same app, no hold
    assert _rest(sock, b"hello").endswith(b"hello")
    sock.close()


def test_an_empty_body_message_writes_a_held_head(server: ServerThread) -> None:
    sock = _request(server, "/stream-hold")
    sock.settimeout(PAUSE_S * 1.75)  # past the empty message, before the event
    head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in head
    assert b"data: x" not in head
    data = _rest(sock, b"0\r\n\r\n")
    assert b"data: x\n\n" in data
    sock.close()


def test_held_head_of_an_empty_body_and_keep_alive(server: ServerThread) -> None:
    sock = _request(server, "/head-only")
    assert _rest(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 200 OK\r\n")
    # the same connection serves the next request
    sock.sendall(b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n")
    assert _rest(sock, b"hello").endswith(b"hello")
    sock.close()


def test_held_head_on_a_closing_connection(server: ServerThread) -> None:
    sock = _request(server, "/head-only", version="1.0")  # no keep-alive: closed after it
    data = _rest(sock, b"never")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close" in data
    sock.close()


def test_head_request_gets_its_held_head(server: ServerThread) -> None:
    sock = _request(server, "/hold", method="HEAD")
    data = _rest(sock, b"\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 5" in data
    sock.close()
