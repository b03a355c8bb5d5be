"""Several routers on real engines: 1 proxy vs 2 proxies in front of the same vLLM fleet.

The simulated instrument (`instruments/routers.py`) models R router replicas; this one runs
them: the fleet of a `backend: vllm` config is started once (`serve.run_backend.FleetKeeper`,
prefix caches reset between variants), and per variant R `akvc proxy` processes (each its own
process with its own in-flight accounting, session affinity and estimated prefix index) sit in
front of it. The replayer sends each request to a proxy chosen at random per request, seeded,
with the simulator's own choice (`routers.pick_replica`), so a request reaches the same
replica index in both. Variants (policy x R) are interleaved and their order rotated per
repeat; each records its requests, instance samples and the machine's load, and the
simulator's R-replica run of the same config is measured beside it (`routers.measures`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from agentic_kvc.config import RunConfig
from agentic_kvc.instruments.routers import Spread, measures, pick_replica, run_routers
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.replay.driver import Replayer, ReplaySettings
from agentic_kvc.replay.prompts import token_fn
from agentic_kvc.runs import write_results
from agentic_kvc.serve.device import pinned
from agentic_kvc.serve.hostload import HostLoadSampler
from agentic_kvc.serve.run_backend import (
    FleetKeeper,
    _fleet_for,
    merge_proxy_records,
    proxy_args_for,
)
from agentic_kvc.serve.sampler import InstanceSampler
from agentic_kvc.serve.services import ProxyProcess
from agentic_kvc.workload.model import Request, Workload

BASE = "config/runs/real_cpu_small.yaml"


class SpreadReplayer(Replayer):
    """A replayer that sends each request to one of several proxies (`pick_replica`)."""

    def __init__(
        self,
        settings: ReplaySettings,
        targets: Sequence[str],
        spread: Spread,
        seed: int,
        tokens: Any,
        clock_origin: float,
    ) -> None:
        super().__init__(settings, tokens, clock_origin)
        self.targets = [t.rstrip("/") for t in targets]
        self.spread: Spread = spread
        self.seed = seed
        self.proxy_of: dict[str, int] = {}

    def replica(self, req: Request) -> int:
        return pick_replica(
            self.spread, len(self.targets), self.seed, req.request_id, req.session_id
        )

    def target_for(self, req: Request) -> str:
        r = self.replica(req)
        self.proxy_of[req.request_id] = r
        return self.targets[r]


def _proxy_args(config: RunConfig) -> list[str]:
    if config.policy.cache_view != "estimated" or config.fleet.roles is not None:
        # Shared KV events or PD roles need engine flags the shared fleet does not have.
        raise ValueError(
            "routers-real: only policy.cache_view=estimated and fleet.roles unset are supported"
        )
    return proxy_args_for(config)


def run_variant(
    config: RunConfig,
    workload: Workload,
    proxies: int,
    spread: Spread,
    run_dir: Path,
    keeper: FleetKeeper,
) -> dict[str, Any]:
    """One real run with `proxies` proxies; writes requests.jsonl / instances.jsonl into
    `run_dir` and returns its measures, host load and how many requests each proxy got."""
    from agentic_kvc.serve.kv_transfer_flags import may_disaggregate

    if may_disaggregate(config.policy.name, config.policy.params):
        raise ValueError(f"routers-real: policy {config.policy.name!r} needs KV connectors")
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with HostLoadSampler(1.0) as host, _fleet_for(config, logs, {}, keeper) as (fleet, shared):
        tokens = token_fn(Path(fleet.plan.model))
        with ExitStack() as stack:
            procs = [
                stack.enter_context(
                    ProxyProcess(
                        fleet.urls,
                        config.policy.name,
                        logs / f"proxy{r}",
                        params=config.policy.params,
                        records=run_dir / f"proxy{r}_records.jsonl",
                        extra_args=_proxy_args(config),
                        cpus=fleet.plan.frontend_cores,
                    )
                )
                for r in range(proxies)
            ]
            settings = ReplaySettings(
                target=procs[0].url,
                model=fleet.model_name,
                mode=config.workload.mode,
                time_scale=1.0,  # applied by load_workload
                max_inflight_sessions=config.replay.max_inflight_sessions,
                timeout_s=config.replay.request_timeout_s,
                stream=config.replay.stream,
                progress=False,
            )
            origin = time.monotonic()
            replayer = SpreadReplayer(
                settings, [p.url for p in procs], spread, config.seed, tokens, origin
            )
            sampler = InstanceSampler(fleet.urls, config.sim.sample_interval_s, origin)

            async def go() -> list[RequestRecord]:
                sampler.start()
                try:
                    return await replayer.run(workload)
                finally:
                    await sampler.stop()

            host.mark("replay")
            with pinned(fleet.plan.frontend_cores):
                client = asyncio.run(go())
            host.close("replay")
            replay_s = time.monotonic() - origin
        # Proxies flushed their records on stop; each proxy has its own clock, so each
        # proxy's rows merge with the client records it served.
        records: list[dict[str, Any]] = []
        offsets = []
        for r in range(proxies):
            path = run_dir / f"proxy{r}_records.jsonl"
            rows = list(read_jsonl(path)) if path.is_file() else []
            mine = [c for c in client if replayer.proxy_of.get(c.request_id) == r]
            merged, offset = merge_proxy_records(mine, rows)
            records += merged
            offsets.append(offset)
    records.sort(key=lambda r: (r["arrival_s"], r["session_id"], r["turn"]))
    for rec in records:
        rec["proxy"] = replayer.proxy_of.get(rec["request_id"])
    samples = [s.to_dict() for s in sampler.samples]
    write_results(run_dir, records, samples)
    load = host.summary().get("replay", {})
    return {
        **measures(records, samples),
        "requests_per_proxy": [sum(rec["proxy"] == r for rec in records) for r in range(proxies)],
        "proxy_clock_offsets_s": offsets,
        "replay_s": round(replay_s, 3),
        "fleet_shared_from": shared,
        "host_load1_mean": (load.get("load1") or {}).get("mean"),
        "host_busy": (load.get("overall") or {}).get("busy"),
        "host_steal": (load.get("overall") or {}).get("steal"),
        "run_dir": str(run_dir),
        "per_request": per_request(records),
    }


def per_request(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per request id: TTFT, and for a session's later turn whether it moved instance (as
    `routers.measures` counts affinity loss); what the report pairs between variants."""
    out: dict[str, dict[str, Any]] = {}
    prev: dict[str, Any] = {}
    for r in sorted(records, key=lambda r: (r["session_id"], r["turn"])):
        if r["error"]:
            continue
        sid = r["session_id"]
        moved = int(prev[sid] != r["prefill_instance"]) if sid in prev else None
        prev[sid] = r["prefill_instance"]
        out[r["request_id"]] = {"ttft_s": r["ttft_s"], "moved": moved}
    return out


def simulate(config: RunConfig, workload: Workload, proxies: int, spread: Spread) -> dict[str, Any]:
    """The simulator's R-replica run of the same config and workload (backend: sim)."""
    from agentic_kvc.sim.run_backend import profile_for

    sim_cfg = config.model_copy(update={"backend": "sim"})
    records, samples, _of = run_routers(sim_cfg, workload, profile_for(sim_cfg), proxies, spread)
    recs = [r.to_dict() for r in records]
    return {**measures(recs, samples), "per_request": per_request(recs)}


def variants(policies: Sequence[str], proxies: Sequence[int], repeat: int) -> list[tuple[str, int]]:
    """Policy x R, rotated by the repeat so that no variant always runs first."""
    grid = [(p, r) for p in policies for r in proxies]
    k = repeat % len(grid)
    return grid[k:] + grid[:k]


def run_bench(
    config: RunConfig,
    policies: Sequence[str],
    proxies: Sequence[int],
    repeats: int,
    results: Path,
    out: Path,
    spread: Spread = "random",
    log: Any = print,
) -> dict[str, Any]:
    """Every variant `repeats` times on one fleet, the simulator beside; writes `out`."""
    from agentic_kvc.workload import load_workload

    workload = load_workload(config.workload, config.seed)
    runs: list[dict[str, Any]] = []
    sims: dict[str, dict[str, Any]] = {}
    keeper = FleetKeeper()
    t0 = time.monotonic()
    try:
        for rep in range(repeats):
            for policy, r in variants(policies, proxies, rep):
                cfg = config.model_copy(
                    update={"policy": config.policy.model_copy(update={"name": policy})}
                )
                run_dir = results / f"{policy}_R{r}_rep{rep}"
                row = run_variant(cfg, workload, r, spread, run_dir, keeper)
                row.update(policy=policy, proxies=r, repeat=rep)
                runs.append(row)
                log(json.dumps({k: row[k] for k in _SHOWN if k in row}))
                key = f"{policy}:{r}"
                if key not in sims:
                    sims[key] = {
                        "policy": policy,
                        "proxies": r,
                        **simulate(cfg, workload, r, spread),
                    }
    finally:
        keeper.close()
    data = {
        "base_config": config.canonical(),
        "spread": spread,
        "sessions": len(workload.sessions),
        "requests": len(workload),
        "repeats": repeats,
        "wall_s": round(time.monotonic() - t0, 1),
        "runs": runs,
        "sim": list(sims.values()),
    }
    atomic_write_json(out, data)
    return data


_SHOWN = (
    "policy",
    "proxies",
    "repeat",
    "requests_per_proxy",
    "errors",
    "affinity_loss",
    "hit_rate",
    "herding",
    "ttft_p90_s",
    "replay_s",
    "host_load1_mean",
)


@click.command("routers-real")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=BASE,
    show_default=True,
    help="A backend: vllm run config (its fleet is started once, shared by all variants).",
)
@click.option("--set", "sets", multiple=True, help="Config override key=value (repeatable).")
@click.option("--sessions", type=int, default=None, help="workload.generator.sessions.")
@click.option("--policies", default="lmetric,unified", show_default=True)
@click.option("--proxies", default="1,2", show_default=True, help="Proxy counts to compare.")
@click.option("--repeats", type=int, default=2, show_default=True, help="Interleaved repeats.")
@click.option(
    "--spread",
    type=click.Choice(["random", "session"]),
    default="random",
    show_default=True,
    help="random: a seeded random proxy per request; session: by a hash of the session id.",
)
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the per-variant run directories (requests.jsonl, ...) here [a temp dir].",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("results/bench/routers_real.json"),
    show_default=True,
)
def routers_real(
    config_path: Path,
    sets: tuple[str, ...],
    sessions: int | None,
    policies: str,
    proxies: str,
    repeats: int,
    spread: str,
    results: Path | None,
    out: Path,
) -> None:
    """1 proxy vs several real proxies in front of the same real vLLM engines.

    Starts the config's fleet once, then per policy and proxy count R starts R `akvc proxy`
    processes (own in-flight accounting and estimated index each), replays the workload with
    each request sent to a seeded random proxy, and records affinity loss, engine-reported
    prefix-hit rate, herding (max/mean running+waiting), TTFT p90 and the machine's load,
    beside the simulator's R-replica run of the same config. Starts real engines: run it
    under `flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock`.
    """
    import tempfile

    from agentic_kvc.config import load_config

    overrides = list(sets) + ([f"workload.generator.sessions={sessions}"] if sessions else [])
    config = load_config(config_path, overrides)
    if config.backend != "vllm":
        raise click.UsageError(f"{config_path}: backend is {config.backend!r}, expected vllm")
    counts = [int(x) for x in proxies.split(",")]
    if any(c < 1 for c in counts) or repeats < 1:
        raise click.UsageError("--proxies must be >= 1 each and --repeats >= 1")
    results = results or Path(tempfile.mkdtemp(prefix="akvc_routers_real_"))
    data = run_bench(
        config,
        [p.strip() for p in policies.split(",") if p.strip()],
        counts,
        repeats,
        results,
        out,
        spread,  # type: ignore[arg-type]
        log=click.echo,
    )
    click.echo(f"wrote {out} ({len(data['runs'])} runs, {data['wall_s']} s); runs in {results}")
