"""One pooled HTTP client per vLLM engine behind the proxy, plus its health probe and scraper.

Each engine gets its own keep-alive pool (`upstream.UpstreamPool`), so a request reuses a
warm TCP connection (no handshake on the hot path) and a dead engine's broken connections
never sit in another engine's pool. When an engine comes back after a failure its pool is
replaced: connections kept from before the restart point at a dead socket, and the first
request on one would fail (the stale-connection bug seen in vllm-router).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentic_kvc.aio import cancel_and_wait
from agentic_kvc.metrics.prometheus import EngineMetrics, parse_vllm_metrics
from agentic_kvc.proxy.upstream import DEFAULT_MAX_IDLE, UpstreamPool, UpstreamRefused

log = logging.getLogger("agentic_kvc.proxy")

# Errors that mean "this engine refused or dropped us" (as opposed to a slow answer):
# upstream.UpstreamRefused / UpstreamDropped, and the OS's own resets.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (ConnectionError,)


@dataclass(slots=True)
class EngineClient:
    index: int
    url: str  # base URL, no trailing slash
    connect_timeout_s: float = 3.0
    max_idle: int = DEFAULT_MAX_IDLE  # idle keep-alive connections kept (upstream.UpstreamPool)
    pool: UpstreamPool | None = None
    healthy: bool = True
    last_error: str | None = None
    refused: bool = False  # the last failed check could not even connect (nothing listens)
    failed_checks: int = 0  # consecutive failed monitor checks (scrape, then /health)
    metrics: EngineMetrics | None = None
    scraped_at: float | None = None
    model_id: str | None = None
    model_root: str | None = None

    def open(self) -> None:
        self.pool = UpstreamPool(self.url, self.connect_timeout_s, self.max_idle)

    async def reopen(self) -> None:
        """Fresh pool after recovery. The old one is retired, not closed: its idle sockets may
        be dead (a restarted engine), but an engine marked out by a probe that merely timed out
        under load may still be streaming answers, and closing those cut them (seen in the PD
        tests on a loaded machine)."""
        old = self.pool
        self.open()
        if old is not None:
            old.retire()

    async def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    async def get(self, path: str, timeout_s: float) -> tuple[int, bytes]:
        assert self.pool is not None, "engine client not opened"
        return await self.pool.get(path, timeout_s)

    async def probe_health(self, timeout_s: float) -> bool:
        try:
            status, _ = await self.get("/health", timeout_s)
        except (TimeoutError, *CONNECTION_ERRORS) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.refused = isinstance(exc, UpstreamRefused)
            return False
        self.refused = False
        if status != 200:
            self.last_error = f"/health answered HTTP {status}"
        return status == 200

    async def scrape(self, timeout_s: float) -> EngineMetrics | None:
        """GET /metrics and parse it; None if unreachable; raises nothing."""
        try:
            status, body = await self.get("/metrics", timeout_s)
        except (TimeoutError, *CONNECTION_ERRORS) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        if status != 200:
            return None
        self.metrics = parse_vllm_metrics(body.decode("utf-8", "replace"))
        self.scraped_at = time.monotonic()
        return self.metrics


HealthCallback = Callable[[EngineClient, bool], None]
ScrapeCallback = Callable[[EngineClient, EngineMetrics], None]


class EngineMonitor:
    """Background loop per engine: scrape a healthy one, probe an unhealthy one.

    A check fails when the scrape fails and a `/health` probe right after it fails too. An
    engine is marked out after `failures_to_mark_out` consecutive failed checks, or at once
    when the probe's connection is refused (nothing listens: the engine is gone). One timed-out
    check is not enough: an engine busy under load answers its probes late, and marking it out
    moved its traffic to the others and flapped it out and in (issue 15). An unhealthy engine
    is probed on `/health` every `health_interval_s` and returns to service on the first 200.
    With scraping off (interval 0), healthy engines are only watched through request errors.
    """

    def __init__(
        self,
        engines: list[EngineClient],
        scrape_interval_s: float,
        health_interval_s: float,
        on_health: HealthCallback,
        on_scrape: ScrapeCallback,
        failures_to_mark_out: int = 3,
    ) -> None:
        if failures_to_mark_out < 1:
            raise ValueError(f"failures_to_mark_out must be >= 1, got {failures_to_mark_out}")
        self.failures_to_mark_out = failures_to_mark_out
        self.engines = engines
        self.scrape_interval_s = scrape_interval_s
        self.health_interval_s = health_interval_s
        self.on_health = on_health
        self.on_scrape = on_scrape
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = [asyncio.Event() for _ in engines]

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(b)) for b in self.engines]

    def poke(self, index: int) -> None:
        """A request saw this engine fail: start probing it now rather than at the next tick."""
        self._wake[index].set()

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []

    async def _sleep(self, index: int, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake[index].wait(), seconds)
        self._wake[index].clear()

    async def _loop(self, b: EngineClient) -> None:
        probe_timeout = max(min(self.health_interval_s, 5.0), 0.5)
        while True:
            try:
                if b.healthy:
                    if self.scrape_interval_s <= 0:
                        await self._sleep(b.index, 3600.0)
                        continue
                    m = await b.scrape(timeout_s=max(self.scrape_interval_s, 1.0))
                    if m is not None:
                        b.failed_checks = 0
                        self.on_scrape(b, m)
                    elif b.healthy and not await b.probe_health(probe_timeout):
                        b.failed_checks += 1
                        if b.refused or b.failed_checks >= self.failures_to_mark_out:
                            b.failed_checks = 0
                            self.on_health(b, False)
                            continue
                    else:
                        b.failed_checks = 0  # alive, if slow to scrape
                    await self._sleep(b.index, self.scrape_interval_s)
                else:
                    if await b.probe_health(probe_timeout):
                        await b.reopen()
                        self.on_health(b, True)
                        m = await b.scrape(timeout_s=probe_timeout)
                        if m is not None:
                            self.on_scrape(b, m)
                        continue
                    await self._sleep(b.index, self.health_interval_s)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad scrape end the monitor
                log.exception("monitor for engine %s failed; retrying", b.url)
                await asyncio.sleep(self.health_interval_s)
