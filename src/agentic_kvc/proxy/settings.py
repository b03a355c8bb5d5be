"""Everything a proxy instance is configured with (CLI flags map one to one onto these)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentic_kvc.policy.base import Role


@dataclass(slots=True)
class ProxySettings:
    backends: list[str]
    policy: str = "round_robin"
    params: dict[str, Any] = field(default_factory=dict)
    cache_view: Literal["estimated", "exact"] = "estimated"
    host: str = "127.0.0.1"
    port: int = 8000
    records: Path | None = None  # JSON lines, one RequestRecord per request
    scrape_interval_s: float = 1.0  # engine /metrics; 0 turns scraping off
    health_interval_s: float = 1.0  # /health probe period of an unhealthy backend
    upstream_timeout_s: float = 600.0  # whole upstream exchange of one request
    connect_timeout_s: float = 3.0
    tokenizer: Path | None = None  # dir or tokenizer.json; default: the backend's model dir
    block_size: int | None = None  # router hashing block size; default: the engine's
    roles: list[Role] | None = None  # per backend; default all "combined"
    retry_refused: bool = True  # a refused connection is retried once on another backend
    # Records' clock: seconds since this time.monotonic() value (default: proxy start), so a
    # run backend in the same machine can put proxy and client times on one clock.
    clock_origin: float | None = None
    # In-process consumers (the run backend) may take records directly as well as from file.
    on_record: Callable[[dict[str, Any]], None] | None = None
    # Filled by the exact cache view's owner (KV events); the proxy only passes it on.
    exact_cache: Any = None

    def __post_init__(self) -> None:
        if not self.backends:
            raise ValueError("at least one --backend URL is needed")
        self.backends = [b.rstrip("/") for b in self.backends]
        for b in self.backends:
            if not b.startswith(("http://", "https://")):
                raise ValueError(f"--backend {b!r}: expected an http:// or https:// URL")
        if self.roles is not None and len(self.roles) != len(self.backends):
            raise ValueError(f"{len(self.roles)} roles given for {len(self.backends)} backends")
        if self.cache_view not in ("estimated", "exact"):
            raise ValueError(f"--cache-view {self.cache_view!r}: expected estimated or exact")
        if self.upstream_timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
