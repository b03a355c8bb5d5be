"""Periodic samples of every instance during a real run: the rows of `instances.jsonl`.

Each tick scrapes every engine's `/metrics` (vLLM's own counters: running, waiting, KV usage,
prefix-cache queries/hits, preemptions) and the proxy's `/metrics` (the router's view:
in-flight requests and pending prefill tokens per instance, and whether it is in service).
An engine that does not answer is sampled as unhealthy rather than stopping the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from agentic_kvc.aio import cancel_and_wait
from agentic_kvc.metrics.prometheus import parse_labels, parse_vllm_metrics
from agentic_kvc.metrics.records import InstanceSample

_PROXY_GAUGES = {
    "akvc_proxy_inflight_requests": "router_inflight",
    "akvc_proxy_pending_prefill_tokens": "router_pending_prefill_tokens",
    "akvc_proxy_engine_healthy": "healthy",
}


def parse_proxy_gauges(text: str) -> dict[int, dict[str, float]]:
    """Per-instance router gauges from the proxy's /metrics text."""
    out: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        if not line.startswith("akvc_proxy_") or "{" not in line:
            continue
        name = line[: line.index("{")]
        key = _PROXY_GAUGES.get(name)
        if key is None:
            continue
        labels = parse_labels(line[line.index("{") + 1 : line.rindex("}")])
        try:
            inst, value = int(labels["instance"]), float(line[line.rindex("}") + 1 :].split()[0])
        except (KeyError, ValueError, IndexError):
            continue
        out.setdefault(inst, {})[key] = value
    return out


@dataclass
class InstanceSampler:
    engine_urls: Sequence[str]
    interval_s: float
    clock_origin: float
    proxy_url: str | None = None
    timeout_s: float = 2.0
    samples: list[InstanceSample] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _get(self, http: aiohttp.ClientSession, url: str) -> str | None:
        try:
            async with http.get(url + "/metrics") as resp:
                return await resp.text() if resp.status == 200 else None
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None

    async def sample_once(self, http: aiohttp.ClientSession) -> list[InstanceSample]:
        t = time.monotonic() - self.clock_origin
        urls = list(self.engine_urls) + ([self.proxy_url] if self.proxy_url else [])
        texts = await asyncio.gather(*(self._get(http, u) for u in urls))
        router = parse_proxy_gauges(texts[-1] or "") if self.proxy_url else {}
        rows = []
        for i, text in enumerate(texts[: len(self.engine_urls)]):
            s = InstanceSample(t=round(t, 4), instance=i, healthy=text is not None)
            if text is not None:
                m = parse_vllm_metrics(text)
                s.running, s.waiting, s.kv_usage = m.running, m.waiting, m.kv_usage
                s.prefix_cache_queries = m.prefix_cache_queries
                s.prefix_cache_hits = m.prefix_cache_hits
                s.external_prefix_cache_hits = m.external_prefix_cache_hits
                s.preemptions = m.preemptions
                # Only an engine with a tier below HBM reports hits from one.
                if m.cached_tokens_by_source.get("host") or m.cached_tokens_by_source.get("disk"):
                    s.host_cached_tokens = m.cached_tokens_by_source.get("host", 0.0)
                    s.disk_cached_tokens = m.cached_tokens_by_source.get("disk", 0.0)
            r = router.get(i, {})
            if "router_inflight" in r:
                s.router_inflight = int(r["router_inflight"])
            if "router_pending_prefill_tokens" in r:
                s.router_pending_prefill_tokens = int(r["router_pending_prefill_tokens"])
            if r.get("healthy") == 0.0:
                s.healthy = False  # the router took it out of service
            rows.append(s)
        self.samples.extend(rows)
        return rows

    async def _loop(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while True:
                t0 = time.monotonic()
                await self.sample_once(http)
                await asyncio.sleep(max(self.interval_s - (time.monotonic() - t0), 0.0))

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop and take one last sample, so counters cover the whole run."""
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            await self.sample_once(http)
