"""Fixtures: fake vLLM engines and a proxy in front of them, each in its own thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.server import ProxyThread, ServerThread
from agentic_kvc.proxy.settings import ProxySettings


@pytest.fixture
def fakes() -> Iterator[list[tuple[FakeVLLM, ServerThread]]]:
    """Two fake vLLM servers (block size 16) on free loopback ports."""
    started = []
    try:
        for _ in range(2):
            fake = FakeVLLM(block_size=16)
            started.append((fake, ServerThread(fake).start()))
        yield started
    finally:
        for _, server in started:
            server.stop()


ProxyFactory = Callable[..., tuple[ProxyThread, httpx.Client]]


@pytest.fixture
def make_proxy(
    fakes: list[tuple[FakeVLLM, ServerThread]], tmp_path: Path
) -> Iterator[ProxyFactory]:
    """Start a proxy over the fakes; keyword arguments override ProxySettings fields."""
    running: list[tuple[ProxyThread, httpx.Client]] = []

    def factory(**overrides: Any) -> tuple[ProxyThread, httpx.Client]:
        settings = ProxySettings(
            engines=[server.url for _, server in fakes],
            port=0,
            records=tmp_path / "records.jsonl",
            scrape_interval_s=0.2,
            health_interval_s=0.1,
            connect_timeout_s=1.0,
            **overrides,
        )
        proxy = ProxyThread(settings).start()
        client = httpx.Client(base_url=proxy.url, timeout=10.0)
        running.append((proxy, client))
        return proxy, client

    yield factory
    for proxy, client in running:
        client.close()
        proxy.stop()
