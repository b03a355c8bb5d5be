"""Fixtures for the PD tests: two PD-speaking fake engines and a proxy over them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pd_fakes import Fakes, PDFake, ProxyFactory

from agentic_kvc.proxy.server import ProxyThread, ServerThread
from agentic_kvc.proxy.settings import ProxySettings


@pytest.fixture
def pd_fakes() -> Iterator[Fakes]:
    started: Fakes = []
    try:
        for i in range(2):
            fake = PDFake(f"fake-{i}", block_size=16)
            started.append((fake, ServerThread(fake).start()))
        yield started
    finally:
        for _, server in started:
            server.stop()


@pytest.fixture
def pd_proxy(pd_fakes: Fakes, tmp_path: Path) -> Iterator[ProxyFactory]:
    running: list[tuple[ProxyThread, httpx.Client]] = []

    def factory(**overrides: Any) -> tuple[ProxyThread, httpx.Client]:
        kw: dict[str, Any] = {
            "engines": [server.url for _, server in pd_fakes],
            "port": 0,
            "records": tmp_path / "records.jsonl",
            "scrape_interval_s": 0.2,
            "health_interval_s": 0.1,
            "connect_timeout_s": 1.0,
            "policy": "static_pd",
            "params": {"prefill": [0], "decode": [1]},
        }
        kw.update(overrides)
        proxy = ProxyThread(ProxySettings(**kw)).start()
        client = httpx.Client(base_url=proxy.url, timeout=10.0)
        running.append((proxy, client))
        return proxy, client

    yield factory
    for proxy, client in running:
        client.close()
        proxy.stop()
