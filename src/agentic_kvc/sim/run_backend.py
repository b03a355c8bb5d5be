"""`backend: sim` runs: the workload through the simulated fleet, into the run directory."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_kvc.config import ConfigError, RunConfig
from agentic_kvc.profiles import get_profile
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.run_backend import BackendResult
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload


def profile_for(config: RunConfig) -> EngineProfile:
    fc = config.fleet
    try:
        # Only a CPU profile depends on the fleet size (frontends without a spare core).
        n = fc.instances if fc.hardware.startswith("cpu") else 1
        return get_profile(fc.hardware, fc.model, fc.gpu_memory_utilization, n)
    except ValueError as exc:
        raise ConfigError(f"fields 'fleet.hardware'/'fleet.model': {exc}") from None


def seed_uses(config: RunConfig) -> list[str]:
    """What the run's `seed` changes in a simulated run (empty: runs that differ only in the
    seed are the same run). The simulator is deterministic apart from these: the workload
    (its generator, `session_jitter_s`) and the frontends' ingress delays, drawn per request
    when `sim.host_neighbour_threads` meets a profile with a background delay (fleet.py). The
    policies' own draws (dynamo_kv, llmd_weighted) use `policy.params.seed`, not this one."""
    uses = []
    if config.workload.generator is not None:
        uses.append("workload.generator")
    if config.workload.session_jitter_s > 0:
        uses.append("workload.session_jitter_s")
    if config.sim.host_neighbour_threads > 0 and profile_for(config).background_delay_s > 0:
        uses.append("sim.host_neighbour_threads (ingress delays)")
    return uses


def free_dropped_fleets() -> None:
    """Free the fleets the caller has dropped: call it between runs in a process that runs
    many (`akvc run-batch`, a sweep). A fleet's structures hold reference cycles (the KV
    pools' doubly linked pieces, the router's eviction callback), which only the cyclic
    collector frees, and a run's survivors sit in its oldest generation, rarely collected:
    without this such a process grows by each run's stores (about 30 MiB per agentic-long run
    with a host tier). A full collection costs in proportion to everything the process holds:
    cheap in a batch process, not in a test session, so `run_sim` does not call it itself."""
    gc.collect()


def prepare_sim(config: RunConfig) -> Callable[..., list[dict[str, Any]]]:
    """Load `config`'s workload once; the result simulates it under any profile (fits), and
    under another config of the same workload and seed if given (e.g. another `sim` section)."""
    workload = load_workload(config.workload, config.seed)

    def simulate(profile: EngineProfile, variant: RunConfig = config) -> list[dict[str, Any]]:
        fleet = SimFleet(variant, workload, profile)
        fleet.run()
        return [r.to_dict() for r in fleet.records]

    return simulate


def run_sim(
    config: RunConfig, run_dir: Path, profile: EngineProfile | None = None
) -> BackendResult:
    """Simulate `config`; `profile` overrides the one named by fleet.hardware/fleet.model."""
    workload = load_workload(config.workload, config.seed)
    profile = profile or profile_for(config)
    t0 = time.perf_counter()
    fleet = SimFleet(config, workload, profile)
    stats = fleet.run()
    wall = time.perf_counter() - t0
    records = sorted(fleet.records, key=lambda r: (r.arrival_s, r.session_id, r.turn))
    extra = {
        "simulator": {
            "profile": {
                "hardware": profile.hardware,
                "model": profile.model,
                "source": profile.source,
                "kv_bytes_per_token": profile.kv_bytes_per_token,
                "kv_capacity_tokens": profile.kv_capacity_tokens,
            },
            "kv_blocks_per_instance": fleet.num_blocks,
            "simulated_s": round(stats.sim_s, 6),
            "wall_s": round(wall, 3),
            "speedup": round(stats.sim_s / wall, 1) if wall > 0 else None,
            "events": stats.events,
            "engine_steps": stats.steps,
            "kv_transfers": stats.transfers,
            "kv_pull_s_mean": stats.transfer_s / stats.transfers if stats.transfers else None,
        },
        "workload": {
            "sessions": len(workload.sessions),
            "requests": len(workload),
            "meta": workload.meta,
        },
    }
    if fleet.tiers is not None:  # KV tiers (issue 29): only when on, so the rest is unchanged
        extra["simulator"]["kv_tier_reloads"] = stats.reloads
        extra["simulator"]["kv_tier_reload_s_mean"] = (
            stats.reload_s / stats.reloads if stats.reloads else None
        )
        extra["simulator"]["kv_tier_links"] = fleet.tiers.links
    return BackendResult(
        [r.to_dict() for r in records], [s.to_dict() for s in fleet.samples], extra
    )
