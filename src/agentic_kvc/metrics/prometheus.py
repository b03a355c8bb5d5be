"""Read the few vLLM `/metrics` values that routers and instance samplers need.

A vLLM server exposes about 70 metric families (histograms included); routers need a handful.
`prometheus_client`'s generic parser builds every family and sample, which costs milliseconds
per scrape on the proxy's event loop; this reader looks only at the lines it wants and skips
the rest by their name, so a scrape every second stays off the request path's latency.

Values are summed over engines (data-parallel servers expose one series per `engine` label),
except KV usage, which is averaged because it is a fraction per engine. Counters are the raw
totals since the engine started: callers take differences between scrapes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

# Canonical field <- metric names (newer name first; older vLLM releases used the gpu_ ones).
_GAUGES: dict[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
}
_COUNTERS: dict[str, str] = {
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:gpu_prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:external_prefix_cache_queries_total": "external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits_total": "external_prefix_cache_hits",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
}
_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
# Prefix-cache hit tokens by the tier that supplied them (device, host, disk, p2p, ...).
_CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
_CACHE_INFO = "vllm:cache_config_info"
# vLLM's SimpleCPUOffloadConnector (0.32) states its tier below HBM: backend (cpu | disk),
# lazy_offload (true | false) and capacity_blocks. Set at the engine's first step with stats,
# so absent until the engine has served a request.
_OFFLOAD_INFO = "vllm:simple_kv_offload_info"
_WANTED = frozenset(
    [*_GAUGES, *_COUNTERS, _BY_SOURCE, _CACHED_BY_SOURCE, _CACHE_INFO, _OFFLOAD_INFO]
)
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(slots=True)
class EngineMetrics:
    """One scrape of one vLLM server. None means the server did not expose that metric."""

    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    external_prefix_cache_queries: float | None = None
    external_prefix_cache_hits: float | None = None
    preemptions: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    # source label -> tokens: local_compute | local_cache_hit | external_kv_transfer
    prompt_tokens_by_source: dict[str, float] = field(default_factory=dict)
    # source label -> prefix-cache hit tokens: device (HBM) | host | disk | p2p | ...
    cached_tokens_by_source: dict[str, float] = field(default_factory=dict)
    block_size: int | None = None
    num_gpu_blocks: int | None = None  # KV cache capacity in blocks (cache_config_info)
    # The engine's KV tier below HBM (simple_kv_offload_info): "cpu" or "disk", whether it
    # stores lazily (from HBM's free queue) or every computed block, and its size in blocks.
    offload_backend: str | None = None
    offload_lazy: bool | None = None
    offload_blocks: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_labels(text: str) -> dict[str, str]:
    """`a="1",b="x\\"y"` -> {"a": "1", "b": 'x"y'} (Prometheus text-format escapes undone)."""
    out = {}
    for key, raw in _LABEL_RE.findall(text):
        out[key] = raw.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    return out


def _split_sample(line: str) -> tuple[str, str, float] | None:
    """`name{labels} value [timestamp]` -> (name, labels text, value); None if not wanted."""
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace]
        if name not in _WANTED:
            return None
        close = line.rfind("}")
        labels, rest = line[brace + 1 : close], line[close + 1 :]
    else:
        name = line[:space] if space != -1 else line
        if name not in _WANTED:
            return None
        labels, rest = "", line[space:]
    parts = rest.split()
    if not parts:
        return None
    try:
        return name, labels, float(parts[0])
    except ValueError:
        return None


def parse_vllm_metrics(text: str) -> EngineMetrics:
    """Extract router-relevant values from a vLLM /metrics body (Prometheus text format)."""
    sums: dict[str, float] = {}
    kv: list[float] = []
    by_source: dict[str, float] = {}
    cached_by: dict[str, float] = {}
    block_size: int | None = None
    num_blocks: int | None = None
    offload: dict[str, str] | None = None
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue  # comments, other exporters' families
        sample = _split_sample(line)
        if sample is None:
            continue
        name, labels, value = sample
        if name == _CACHE_INFO:
            if block_size is None:
                info = parse_labels(labels)
                bs, nb = info.get("block_size", ""), info.get("num_gpu_blocks", "")
                block_size = int(bs) if bs.isdigit() else None
                num_blocks = int(nb) if nb.isdigit() else None
            continue
        if name == _OFFLOAD_INFO:
            if offload is None and value == 1.0:
                offload = parse_labels(labels)
            continue
        if name in (_BY_SOURCE, _CACHED_BY_SOURCE):
            into = by_source if name == _BY_SOURCE else cached_by
            source = parse_labels(labels).get("source", "unknown")
            into[source] = into.get(source, 0.0) + value
            continue
        key = _GAUGES.get(name)
        if key == "kv_usage":
            kv.append(value)
            continue
        key = key or _COUNTERS[name]
        sums[key] = sums.get(key, 0.0) + value
    out = EngineMetrics(
        prompt_tokens_by_source=by_source,
        cached_tokens_by_source=cached_by,
        block_size=block_size,
        num_gpu_blocks=num_blocks,
    )
    if offload is not None:
        blocks = offload.get("capacity_blocks", "")
        lazy = offload.get("lazy_offload", "")
        out.offload_backend = offload.get("backend") or None
        out.offload_lazy = {"true": True, "false": False}.get(lazy.lower())
        out.offload_blocks = int(blocks) if blocks.isdigit() else None
    if "running" in sums:
        out.running = int(sums.pop("running"))
    if "waiting" in sums:
        out.waiting = int(sums.pop("waiting"))
    if kv:
        out.kv_usage = sum(kv) / len(kv)
    for key, value in sums.items():
        setattr(out, key, value)
    return out
