"""Fault-injecting stand-ins for an engine, for tests of the proxy's own handling.

These test how the proxy copes with an engine's answers (status codes, slowness, dropped
connections), not what vLLM does, so a small local server is enough. The real-engine cases
live in test_real_vllm_faults.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentic_kvc.proxy.app import ProxyApp
from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.server import ProxyThread, ServerThread
from agentic_kvc.proxy.settings import ProxySettings

from . import report as _report

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder belongs to the reliability suite (`-m reliability`)."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.reliability)


# ---- the suite's report (report.py): faults injected, bad inputs tried, requests lost ----


@pytest.fixture(scope="session", autouse=True)
def _count_proxy_requests() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ProxyApp, "_generate", _report.count_requests(ProxyApp._generate))
        yield


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # From the session's reports, not a per-test hook: a conftest's per-test hooks see only
    # its own folder's tests, and the real-engine cases live in tests/integration too.
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if not isinstance(rep, pytest.TestReport):
                continue
            if rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed"):
                _report.LEDGER.outcome(rep.nodeid.split("::")[-1].split("[")[0], rep.outcome)
    if not _report.LEDGER.outcomes:
        return
    terminalreporter.write_sep("=", "reliability report")
    for line in _report.LEDGER.lines():
        terminalreporter.write_line(line)
    target = os.environ.get("AKVC_RELIABILITY_REPORT")
    if target:
        _report.write(target)
        terminalreporter.write_line(f"(written to {target})")


class FaultEngine(FakeVLLM):
    """FakeVLLM whose answers can be switched to faults while it runs.

    `status`: answer every generation request with this HTTP status (a JSON error body);
    `healthy`: /health and /metrics answer 503 when False;
    `fail_checks`: the next N monitor checks fail (/metrics and then /health answer 503; each
    failed /health counts one), as an engine too busy to answer them would;
    `first_token_delay_s` / `token_delay_s` (inherited): a slow engine.
    """

    def __init__(self) -> None:
        super().__init__(block_size=16)
        self.status = 200
        self.healthy = True
        self.fail_checks = 0
        self.generate_calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path in ("/health", "/metrics") and (not self.healthy or self.fail_checks > 0):
                if path == "/health" and self.fail_checks > 0:
                    self.fail_checks -= 1
                await _reply(send, 503, b"")
                return
            if path.startswith("/v1/") and path.endswith("completions"):
                self.generate_calls += 1
                if self.status != 200:
                    while (await receive()).get("more_body"):
                        pass
                    body = {"error": {"message": "injected", "code": self.status}}
                    await _reply(send, self.status, json.dumps(body).encode())
                    return
        await super().__call__(scope, receive, send)


async def _reply(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class DroppingEngine:
    """A raw TCP server that answers GET /health and /metrics but closes the connection on
    every POST before a byte of response: an engine that is up yet drops requests."""

    METRICS = b'vllm:num_requests_running{engine="0"} 0.0\n'

    def __init__(self) -> None:
        self.posts = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(5)
        assert self._server is not None
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line = head.split(b"\r\n", 1)[0]
                if line.startswith(b"POST"):
                    self.posts += 1
                    break
                body = self.METRICS if b"/metrics" in line else b""
                # `connection: close`: no idle keep-alive connection is pooled, so a POST always
                # goes out on a fresh one (a reused one that closes is re-sent once by design).
                head = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
                writer.write(head % len(body) + body)
                await writer.drain()
                break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    def stop(self) -> None:
        assert self._server is not None
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture
def faults() -> Iterator[list[tuple[FaultEngine, ServerThread]]]:
    started = []
    try:
        for _ in range(2):
            fb = FaultEngine()
            started.append((fb, ServerThread(fb).start()))
        yield started
    finally:
        for _, server in started:
            server.stop()


ProxyFactory = Callable[..., tuple[ProxyThread, httpx.Client]]


@pytest.fixture
def proxy_over(tmp_path: Path) -> Iterator[ProxyFactory]:
    """`proxy_over(urls, **settings)`: a proxy in a thread over these engine URLs."""
    running: list[tuple[ProxyThread, httpx.Client]] = []

    def factory(urls: list[str], **overrides: Any) -> tuple[ProxyThread, httpx.Client]:
        kw: dict[str, Any] = {
            "port": 0,
            "records": tmp_path / "records.jsonl",
            "scrape_interval_s": 0.2,
            "health_interval_s": 0.1,
            "connect_timeout_s": 1.0,
        }
        settings = ProxySettings(engines=urls, **(kw | overrides))
        proxy = ProxyThread(settings).start()
        client = httpx.Client(base_url=proxy.url, timeout=15.0)
        running.append((proxy, client))
        return proxy, client

    yield factory
    for proxy, client in running:
        client.close()
        proxy.stop()


def records_of(proxy: ProxyThread) -> list[dict[str, Any]]:
    proxy.app.records.flush()
    path = proxy.app.settings.records
    assert path is not None
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def idle(proxy: ProxyThread) -> bool:
    return all(i.num_requests == 0 for i in proxy.app.state.instances)
