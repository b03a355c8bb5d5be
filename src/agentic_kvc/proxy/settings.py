"""Everything a proxy instance is configured with (CLI flags map one to one onto these)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentic_kvc.policy.base import Role
from agentic_kvc.proxy.token_memo import DEFAULT_BUDGET_MIB
from agentic_kvc.proxy.upstream import DEFAULT_MAX_IDLE


@dataclass(slots=True)
class ProxySettings:
    engines: list[str]
    policy: str = "round_robin"
    params: dict[str, Any] = field(default_factory=dict)
    cache_view: Literal["estimated", "exact"] = "estimated"
    host: str = "127.0.0.1"
    port: int = 8000
    records: Path | None = None  # JSON lines, one RequestRecord per request
    scrape_interval_s: float = 1.0  # engine /metrics; 0 turns scraping off
    health_interval_s: float = 1.0  # /health probe period of an unhealthy engine
    # Consecutive failed checks (scrape, then /health) before the monitor marks an engine out;
    # a refused connection marks it out at once (proxy/engine_clients.EngineMonitor).
    health_failures: int = 3
    upstream_timeout_s: float = 600.0  # whole upstream exchange of one request
    connect_timeout_s: float = 3.0
    # Idle keep-alive connections kept per engine after a burst (busy ones are not capped).
    max_idle_connections: int = DEFAULT_MAX_IDLE
    tokenizer: Path | None = None  # dir or tokenizer.json; default: the engine's model dir
    # MiB for each prompt memo: the token ids of recent chat/text prompts (token_memo.py), of
    # large token-id prompts (ids_memo.py) and sessions' last block hashes (cache_view.py),
    # reused by the next turn.
    token_memo_mib: int = DEFAULT_BUDGET_MIB
    block_size: int | None = None  # router hashing block size; default: the engine's
    roles: list[Role] | None = None  # per engine; default all "combined"
    retry_refused: bool = True  # a refused connection is retried once on another engine
    # Finished sessions first: a request carrying the finish signal (proxy/session.py) asks its
    # decode engine to free its KV to the head of the free queue (vLLM with the release-first
    # plugin, serve/vllm_release_first.py; the simulator's `sim.finish_first`).
    finish_first: bool = False
    # Records' clock: seconds since this time.monotonic() value (default: proxy start), so a
    # run backend in the same machine can put proxy and client times on one clock.
    clock_origin: float | None = None
    # In-process consumers (the run backend) may take records directly as well as from file.
    on_record: Callable[[dict[str, Any]], None] | None = None
    # The exact view (cache/kv_events.ExactCacheView); built from `kv_events` when None.
    exact_cache: Any = None
    # The estimated view also models each engine's KV tier below HBM (host or disk), sized and
    # fed as the engine states in its /metrics (`vllm:simple_kv_offload_info`), for policies
    # that read tiers (`--tier-view`; proxy/cache_view.py). `engine_max_num_batched_tokens`:
    # the engines' setting, which fixes how far vLLM's lazy store walks (None: not known, the
    # estimate then stores at HBM eviction only).
    tier_view: bool = False
    engine_max_num_batched_tokens: int | None = None
    # Per engine, the ZMQ endpoint of its KV event publisher (`--cache-view exact`).
    kv_events: list[str] | None = None
    # PD execution (proxy/pd.py): the engines' KV connector, and for Mooncake each engine's
    # engine id and bootstrap address ({"engine_id": ..., "bootstrap_addr": "host:port"}).
    kv_connector: Literal["nixl", "mooncake"] = "nixl"
    kv_peers: list[dict[str, str]] | None = None
    # Clients must send `Authorization: Bearer <api_key>` on /v1/* when set (never logged).
    api_key: str | None = field(default=None, repr=False)
    # Session identity (proxy/session.py): a header named by the operator, read before the
    # agent conventions; and whether a request with no id gets a session from its prompt.
    session_header: str | None = None
    prefix_sessions: bool = True
    # Sessions the router remembers (affinity, turn counts); the least recently routed are
    # forgotten beyond it, so a long-running proxy's memory stays bounded.
    max_sessions: int = 65536

    def __post_init__(self) -> None:
        if not self.engines:
            raise ValueError("at least one --engine URL is needed")
        self.engines = [e.rstrip("/") for e in self.engines]
        for e in self.engines:
            if not e.startswith(("http://", "https://")):
                raise ValueError(f"--engine {e!r}: expected an http:// or https:// URL")
        if self.roles is not None and len(self.roles) != len(self.engines):
            raise ValueError(f"{len(self.roles)} roles given for {len(self.engines)} engines")
        if self.cache_view not in ("estimated", "exact"):
            raise ValueError(f"--cache-view {self.cache_view!r}: expected estimated or exact")
        if self.tier_view and self.cache_view != "estimated":
            raise ValueError(
                "--tier-view models tiers in the estimated view; the exact view reads them from "
                "the engines' KV events"
            )
        n = self.engine_max_num_batched_tokens
        if n is not None and n < 1:
            raise ValueError(f"--engine-max-num-batched-tokens {n}: expected >= 1")
        for name, per in (("--kv-events", self.kv_events), ("kv_peers", self.kv_peers)):
            if per is not None and len(per) != len(self.engines):
                raise ValueError(f"{name}: {len(per)} given for {len(self.engines)} engines")
        if self.kv_connector not in ("nixl", "mooncake"):
            raise ValueError(f"--kv-connector {self.kv_connector!r}: expected nixl or mooncake")
        if self.kv_connector == "mooncake" and self.kv_peers is None:
            raise ValueError(
                "--kv-connector mooncake needs each engine's id and bootstrap address (kv_peers)"
            )
        if self.upstream_timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_sessions < 1:
            raise ValueError(f"--max-sessions {self.max_sessions}: must be >= 1")
        if self.health_failures < 1:
            raise ValueError(f"--health-failures {self.health_failures}: must be >= 1")
        if self.max_idle_connections < 0:
            raise ValueError(f"--max-idle-connections {self.max_idle_connections}: must be >= 0")
