"""`backend: vllm` runs: real engines behind the proxy, driven by the replayer.

    fleet (fleet.*) -> proxy (policy.*) -> replay (workload.*, replay.*) -> records + samples

One clock for everything: the replayer and the sampler count seconds from `clock_origin`
(time.monotonic() in this process). The proxy runs in its own process and counts from its
own start; its per-request breakdown (t_prefill_sent, t_prefill_done, scores, KV transfer) is
shifted onto the run clock by the offset estimated from the request pairs (see
`estimate_offset`) and merged into the client's records, which keep the client-side TTFT,
ITL and E2E that `vllm bench serve` would report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from agentic_kvc.config import RunConfig
from agentic_kvc.io import read_jsonl
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.replay.driver import ReplaySettings, TokenFn, replay_async
from agentic_kvc.replay.prompts import token_fn
from agentic_kvc.run_backend import BackendResult, workload_facts
from agentic_kvc.serve.device import detect_device, pinned
from agentic_kvc.serve.hostload import HostLoadSampler
from agentic_kvc.serve.kv_transfer_flags import (
    kv_launch_for_run,
    may_disaggregate,
    warm_nixl_pairs,
)
from agentic_kvc.serve.launcher import VllmFleet
from agentic_kvc.serve.sampler import InstanceSampler
from agentic_kvc.serve.services import ProxyProcess
from agentic_kvc.serve.vllm_refresh_on_arrival import ENV as REFRESH_ON_ARRIVAL
from agentic_kvc.workload.model import Workload

# Proxy-only fields of the breakdown record; the client measures the rest itself.
_PROXY_TIMES = ("t_prefill_sent", "t_prefill_done")
_PROXY_FIELDS = (
    "kv_transfer_tokens",
    "kv_transfer_s",
    "scores",
    "predicted_cached_tokens",
    "cache_view",
    "policy",
    "route_class",
    "reason",
    "prefill_instance",
    "decode_instance",
    "session_source",
    "parent_session_id",
    # The exact view's expected loads from the tiers below HBM (issue 30), beside the engine's
    # `cached_tokens`.
    "predicted_host_tokens",
    "predicted_disk_tokens",
)
# Machine load sampling period (1 Hz: two small /proc reads per tick).
HOST_LOAD_INTERVAL_S = 1.0


def device_for(cfg: RunConfig) -> str:
    """`fleet.hardware` names a CPU profile (cpu-*) or anything else: then auto-detect."""
    return "cpu" if cfg.fleet.hardware.startswith("cpu") else "auto"


def estimate_offset(pairs: list[tuple[float, float]]) -> float | None:
    """Proxy clock -> run clock offset from (client send, proxy receive) pairs.

    client_send = T - c0 and proxy_recv = T + latency - p0 for the same request, so
    client_send - proxy_recv = (p0 - c0) - latency. The largest difference is the one with
    the least latency: it is within one loopback hop (well under 1 ms) of the true offset.
    """
    return max(c - p for c, p in pairs) if pairs else None


def merge_proxy_records(
    client: list[RequestRecord], proxy_rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], float | None]:
    """Client records enriched with the proxy's breakdown (by request id)."""
    by_id = {row.get("request_id"): row for row in proxy_rows}
    pairs = [
        (r.t_proxy_recv, by_id[r.request_id]["t_proxy_recv"])
        for r in client
        if r.request_id in by_id
        and r.t_proxy_recv is not None
        and by_id[r.request_id].get("t_proxy_recv") is not None
    ]
    offset = estimate_offset(pairs)
    out = []
    for rec in client:
        row = by_id.get(rec.request_id)
        if row is not None:
            for key in _PROXY_FIELDS:
                value = row.get(key)
                if value not in (None, "", {}):
                    setattr(rec, key, value)
            if offset is not None:
                for key in _PROXY_TIMES:
                    if row.get(key) is not None:
                        setattr(rec, key, row[key] + offset)
        out.append(rec.finalize().to_dict())
    return out, offset


async def _replay_with_sampling(
    workload: Workload,
    settings: ReplaySettings,
    tokens: TokenFn,
    sampler: InstanceSampler,
    origin: float,
) -> list[RequestRecord]:
    sampler.start()
    try:
        return await replay_async(workload, settings, tokens, clock_origin=origin)
    finally:
        await sampler.stop()


# vLLM serves POST /reset_prefix_cache only in its development mode.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


class FleetKeeper:
    """Keeps the fleets of consecutive real runs that launch them identically (a batch of runs
    that differ only in the policy): a fleet's start-up, about 30 s of a 2-core machine, is
    paid once per batch. Each run starts from empty prefix caches (vLLM's development-mode
    reset), so runs stay independent of their order; the pipeline still rotates the order per
    repeat so that no variant always runs first.

    `keep` fleets are kept at once (default 1: a run that needs another launch stops the kept
    one). Runs that alternate between two engine launches (an engine plugin on and off,
    interleaved so that the machine's state falls on both alike) keep both with `keep=2`; the
    fleet not in use is idle, its engines waiting for work.

    A fleet with KV events (the exact view) is kept too: its event sockets live in a directory
    of the keeper's (`events_dir_for`, one per launch, so two kept fleets never share a
    socket), consecutive runs launch it with the same flags, and each run's proxy
    subscribes afresh to an engine whose caches were just emptied. A fleet with a KV tier below
    HBM (`fleet.kv_tiers`) has the tier emptied as well (`reset_external`), so no run inherits
    another's offloaded blocks."""

    def __init__(self, keep: int = 1) -> None:
        if keep < 1:
            raise ValueError(f"FleetKeeper: keep must be >= 1, got {keep}")
        self.keep = keep
        # key -> (fleet, the run directory whose logs/ hold its engines' logs); least recently
        # used first.
        self._fleets: dict[str, tuple[VllmFleet, str]] = {}
        self._events_dirs: dict[str, str] = {}

    @property
    def events_dir(self) -> str:
        """The event-socket directory of fleets whose launch is described by nothing more."""
        return self.events_dir_for(None)

    def events_dir_for(self, launch: Any) -> str:
        """A short directory for the KV-event sockets of kept fleets launched as `launch` says
        (any JSON-able description: the fleet config and the engines' environment; made on
        first use). Runs that share a fleet describe it alike, so they name the same sockets;
        two fleets kept at once are launched differently, so theirs differ."""
        tag = json.dumps(launch, sort_keys=True)
        if tag not in self._events_dirs:
            self._events_dirs[tag] = tempfile.mkdtemp(prefix="akvc-ev-")
        return self._events_dirs[tag]

    def fleet(
        self, key: str, start: Any, run_dir: Path, reset_external: bool = False
    ) -> tuple[VllmFleet, str | None]:
        """The running fleet for `key` (reset; its KV tier too with `reset_external`), or a
        new one from `start()`; and the run directory that started it when it is shared,
        else None."""
        kept = self._fleets.pop(key, None)
        if kept is not None and kept[0].all_alive():
            self._fleets[key] = kept  # most recently used
            fleet = kept[0]
            reset_prefix_caches(fleet.urls, external=reset_external)
            if reset_external:
                flush_kv_events(fleet.urls, fleet.model_name)
            return fleet, kept[1]
        if kept is not None:
            kept[0].stop()
        while len(self._fleets) >= self.keep:  # the least recently used goes
            self._fleets.pop(next(iter(self._fleets)))[0].stop()
        fleet = start().start()
        self._fleets[key] = (fleet, str(run_dir))
        return fleet, None

    def _stop_fleets(self) -> None:
        while self._fleets:
            self._fleets.popitem()[1][0].stop()

    def close(self) -> None:
        self._stop_fleets()
        for folder in self._events_dirs.values():
            shutil.rmtree(folder, ignore_errors=True)
        self._events_dirs.clear()


def reset_prefix_caches(urls: list[str], timeout_s: float = 30.0, external: bool = False) -> None:
    """Empty every engine's prefix cache, and with `external` its KV connector's cache (a
    tier below HBM: vLLM's `reset_external=true`); fail loudly if an engine keeps refusing (a
    run that silently inherited the previous run's cache would report hits it did not earn).
    vLLM answers {"success": false} while blocks are still held (a request being torn down,
    a tier transfer not yet reported), so it is asked again for a few seconds."""
    query = "?reset_external=true" if external else ""
    for url in urls:
        deadline = time.monotonic() + timeout_s
        while True:
            resp = httpx.post(f"{url}/reset_prefix_cache{query}", timeout=timeout_s)
            if resp.status_code == 200 and resp.json().get("success") is True:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{url}/reset_prefix_cache: HTTP {resp.status_code} {resp.text[:200]}"
                )
            time.sleep(0.5)


def flush_kv_events(urls: list[str], model: str, timeout_s: float = 60.0) -> None:
    """One engine step on every engine, so that the KV events a cache reset queued are
    published now, before the next run's proxy subscribes.

    vLLM publishes events only when the engine steps. A reset's `AllBlocksCleared` events wait
    for the next step, i.e. the next run's first request; the tier's (vLLM's CPU block pool's)
    carries no medium and comes after that step's HBM `BlockStored` events, so the exact view
    forgot every instance's first blocks (the shared system prompt), and every later block,
    whose parent is one of them, could not be keyed: in the first tiers_real campaign
    (15:14-15:19 UTC) the view of every run after the first on a kept fleet predicted 0 cached
    tokens. A one-token prompt fills no block, so it stores nothing and hits nothing."""
    body = {"model": model, "prompt": [0], "max_tokens": 1, "temperature": 0}
    for url in urls:
        httpx.post(f"{url}/v1/completions", json=body, timeout=timeout_s).raise_for_status()


_SHARED: FleetKeeper | None = None  # set by `shared_fleets()`


@contextlib.contextmanager
def shared_fleets(keep: int = 1) -> Iterator[FleetKeeper]:
    """Within this block, real runs of this process share their fleet when they launch it
    identically (`akvc run-batch`), up to `keep` fleets at once (`FleetKeeper`); they are
    stopped when the block ends."""
    global _SHARED
    keeper, previous = FleetKeeper(keep), _SHARED
    _SHARED = keeper
    try:
        yield keeper
    finally:
        _SHARED = previous
        keeper.close()


def fleets_launched(configs: Iterable[RunConfig]) -> int:
    """How many differently launched fleets these runs' real engines are (fleet config,
    device, engine environment): what `akvc run-batch` keeps at once, so that a batch whose
    runs alternate between fleets (an interleaved group: HBM only and + host) does not
    restart one for every run. At least 1; and 1 where any fleet is on GPUs: every fleet
    launches on the same devices, so two cannot stand side by side (the keeper relaunches)."""
    real = [c for c in configs if c.backend == "vllm"]
    if any(device_for(c) != "cpu" for c in real):
        return 1
    launches = {
        json.dumps(
            [c.fleet.model_dump(mode="json"), device_for(c), engine_env_for(c)], sort_keys=True
        )
        for c in real
    }
    return max(1, len(launches))


def run_vllm(config: RunConfig, run_dir: Path) -> BackendResult:
    """Start fleet and proxy, replay the workload through the proxy, tear everything down
    (inside `shared_fleets()`, the fleet may be the previous run's, reset, and stays up).

    The machine's load is sampled from fleet start to teardown (`host_load`, with the replay
    as its own window): on a shared host it explains run-to-run differences."""
    with HostLoadSampler(HOST_LOAD_INTERVAL_S) as host:
        result = _run_vllm(config, run_dir, host, _SHARED)
        result.extra["host_load"] = host.stop()
    return result


@contextlib.contextmanager
def _fleet_for(
    config: RunConfig,
    logs: Path,
    kv_plan: dict[str, Any],
    keeper: FleetKeeper | None,
    events_only: bool = False,
) -> Iterator[tuple[VllmFleet, str | None]]:
    """A fleet of its own, or the keeper's when the run's engines need no PD connector
    (connector state, e.g. NIXL handshakes, is not something a cache reset clears):
    `kv_plan` empty, or only KV events (`events_only`, sockets in the keeper's directory).
    A KV tier (`fleet.kv_tiers`) is part of the fleet config, and the keeper empties it."""
    more_env = engine_env_for(config)
    if keeper is None or (kv_plan and not events_only):
        with VllmFleet.from_config(
            config.fleet, logs, device_for(config), extra_env=more_env, **kv_plan
        ) as fleet:
            yield fleet, None
        return
    n = config.fleet.instances
    args = kv_plan.get("per_instance_args")
    env = [{**DEV_MODE_ENV, **more_env, **e} for e in kv_plan.get("per_instance_env") or [{}] * n]
    key = json.dumps(
        [config.fleet.model_dump(mode="json"), device_for(config), args, more_env],
        sort_keys=True,
    )

    def start() -> VllmFleet:
        return VllmFleet.from_config(
            config.fleet, logs, device_for(config), per_instance_args=args, per_instance_env=env
        )

    yield keeper.fleet(key, start, logs.parent, reset_external=config.fleet.kv_tiers.enabled)


def engine_env_for(config: RunConfig) -> dict[str, str]:
    """Engine environment a run config fixes beyond `fleet.vllm_env`: the refresh-on-arrival
    plugin (serve/vllm_refresh_on_arrival.py) where `sim.refresh_on_arrival` is on, on real
    engines as in the simulator."""
    return {REFRESH_ON_ARRIVAL: "1"} if config.sim.refresh_on_arrival else {}


def proxy_args_for(config: RunConfig) -> list[str]:
    """The proxy's command-line arguments that a run config fixes: its cache view (with the
    engines' KV tier modelled in the estimated view when `fleet.kv_tiers` has one), scrape
    interval, request timeout, finished-first eviction (`sim.finish_first`, on real engines
    too) and, under PD roles, one --role per instance (the KV events
    endpoints come from the engines' launch plan and are added by the caller)."""
    args = [
        "--cache-view",
        config.policy.cache_view,
        "--scrape-interval",
        str(config.sim.scrape_interval_s),
        "--timeout",
        str(config.replay.request_timeout_s),
    ]
    for role in config.fleet.roles or ():
        args += ["--role", role]
    if config.sim.finish_first:  # the engines' side: serve/vllm_release_first.py
        args.append("--finish-first")
    if config.fleet.kv_tiers.enabled and config.policy.cache_view == "estimated":
        # The estimated view models the engines' tier as they state it (proxy/cache_view.py);
        # the batch size fixes how far their lazy store walks.
        args += [
            "--tier-view",
            "--engine-max-num-batched-tokens",
            str(config.fleet.max_num_batched_tokens),
        ]
    return args


def _run_vllm(
    config: RunConfig, run_dir: Path, host: HostLoadSampler, keeper: FleetKeeper | None
) -> BackendResult:
    from agentic_kvc.workload import load_workload

    workload = load_workload(config.workload, config.seed)
    logs = run_dir / "logs"
    proxy_records = run_dir / "proxy_records.jsonl"
    proxy_args = proxy_args_for(config)
    # PD-capable policies need a KV connector on every engine; the exact view needs KV events.
    # Events alone leave the fleet shareable between runs (sockets in the keeper's directory).
    events_only = keeper is not None and not may_disaggregate(
        config.policy.name, config.policy.params
    )
    kv = kv_launch_for_run(
        config.policy.name,
        config.policy.params,
        config.policy.cache_view,
        config.fleet.instances,
        config.fleet.roles,
        detect_device(device_for(config)),
        events_dir=(
            keeper.events_dir_for([config.fleet.model_dump(mode="json"), engine_env_for(config)])
            if keeper is not None and events_only and config.policy.cache_view == "exact"
            else None
        ),
    )
    kv_plan: dict[str, Any] = {}
    if kv is not None:
        kv_plan = {"per_instance_args": kv.args, "per_instance_env": kv.env}
        for endpoint in kv.events_endpoints:
            proxy_args += ["--kv-events", endpoint]
    t_setup = time.monotonic()
    with _fleet_for(config, logs, kv_plan, keeper, events_only) as (fleet, shared_from):
        if kv is not None and may_disaggregate(config.policy.name, config.policy.params):
            warm_nixl_pairs(fleet.urls, fleet.model_name, [i.role for i in kv.instances])
        tokens = token_fn(Path(fleet.plan.model))
        with ProxyProcess(
            fleet.urls,
            config.policy.name,
            logs,
            params=config.policy.params,
            records=proxy_records,
            extra_args=proxy_args,
            cpus=fleet.plan.frontend_cores,
        ) as proxy:
            setup_s = time.monotonic() - t_setup
            settings = ReplaySettings(
                target=proxy.url,
                model=fleet.model_name,
                mode=config.workload.mode,
                time_scale=1.0,  # workload.time_scale is applied by load_workload
                max_inflight_sessions=config.replay.max_inflight_sessions,
                timeout_s=config.replay.request_timeout_s,
                stream=config.replay.stream,
                api=config.replay.api,
            )
            origin = time.monotonic()
            sampler = InstanceSampler(
                fleet.urls, config.sim.sample_interval_s, origin, proxy_url=proxy.url
            )
            host.mark("replay")
            with pinned(fleet.plan.frontend_cores):
                client = asyncio.run(
                    _replay_with_sampling(workload, settings, tokens, sampler, origin)
                )
            host.close("replay")
            replay_s = time.monotonic() - origin
            proxy_desc = proxy.describe()
        fleet_desc = fleet.describe()
    # The proxy flushes its records when it stops, so they are read only after that.
    rows = list(read_jsonl(proxy_records)) if proxy_records.is_file() else []
    records, offset = merge_proxy_records(client, rows)
    extra = {
        "fleet": fleet_desc,
        "proxy": {**proxy_desc, "records": str(proxy_records), "n_records": len(rows)},
        "clock": {"proxy_offset_s": offset},
        "replay": {
            "mode": settings.mode,
            "max_inflight_sessions": settings.max_inflight_sessions,
            "timeout_s": settings.timeout_s,
            "wall_s": round(replay_s, 3),
        },
        "setup_s": round(setup_s, 3),
        # Set when the engines were started by an earlier run of the same batch (their logs
        # are in that run's directory) and reset for this one.
        "fleet_shared_from": shared_from,
        "workload": workload_facts(workload),
        "logs": str(logs),
    }
    return BackendResult(records, [s.to_dict() for s in sampler.samples], extra)
