"""The proxy process under 1,000 concurrent streams, round after round: no fd or memory growth.

This tests the proxy's own file descriptors and memory, not vLLM's, so the engines are
fake vLLM servers (each its own process). Slow: `make test-reliability`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from agentic_kvc.serve.ports import LOOPBACK, free_port, wait_http_ok
from agentic_kvc.serve.procs import ManagedProcess
from agentic_kvc.serve.services import ProxyProcess

pytestmark = pytest.mark.slow
STREAMS = 1_000
ROUNDS = 4


def _usage(pid: int) -> tuple[int, int]:
    """(RSS KiB, open fds) of a process."""
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return rss, len(list(Path(f"/proc/{pid}/fd").iterdir()))


async def _round(url: str, pid: int) -> tuple[int, int]:
    """STREAMS streams at once; (streams that ended with [DONE], peak proxy fds seen)."""
    body = {"prompt": list(range(32)), "max_tokens": 4, "stream": True, "fake_token_delay_s": 0.5}
    peak = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _usage(pid)[1])
            await asyncio.sleep(0.1)

    async def one(http: aiohttp.ClientSession) -> bool:
        async with http.post(url + "/v1/completions", json=body) as r:
            text = await r.text()
        return r.status == 200 and text.endswith("data: [DONE]\n\n") and '"error"' not in text

    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(60)) as http:
        watcher = asyncio.create_task(watch())
        ok = await asyncio.gather(*(one(http) for _ in range(STREAMS)))
        done.set()
        await watcher
    return sum(ok), peak


def test_thousand_concurrent_streams_leave_no_fd_or_memory_growth(tmp_path: Path) -> None:
    fakes = []
    try:
        for i in range(2):
            port = free_port()
            argv = [sys.executable, "-m", "agentic_kvc.proxy.fake_engine", "--port", str(port)]
            fakes.append(ManagedProcess(f"fake{i}", argv, tmp_path / f"fake{i}.log").start())
            wait_http_ok(f"http://{LOOPBACK}:{port}/health", 30, fakes[-1].alive)
            fakes[-1].url = f"http://{LOOPBACK}:{port}"  # type: ignore[attr-defined]
        urls = [f.url for f in fakes]  # type: ignore[attr-defined]
        with ProxyProcess(urls, "round_robin", tmp_path, log_level="warning") as proxy:
            assert proxy.proc is not None and proxy.proc.pid is not None
            pid = proxy.proc.pid
            after = []
            for _ in range(ROUNDS):
                ok, peak = asyncio.run(_round(proxy.url, pid))
                time.sleep(1.0)  # connections closed by the clients are reaped
                after.append(_usage(pid))
                assert ok == STREAMS, f"{STREAMS - ok} streams failed"
                assert peak > STREAMS  # they were open at once (client + upstream sockets)
            rss = [a[0] for a in after]
            fds = [a[1] for a in after]
            print(f"proxy after each round: rss KiB {rss}, fds {fds}")
            assert fds[-1] <= fds[0] + 5, fds  # no leaked sockets
            # The first round grows pools and allocator arenas; later rounds must not.
            assert rss[-1] <= rss[1] * 1.05 + 2_048, rss
    finally:
        for f in fakes:
            f.stop()
