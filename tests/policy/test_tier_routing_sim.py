"""Tier-aware routing in the simulator (issue 29): every tier-aware policy runs on a fleet with
a host tier through both cache views, the router's reload accounting balances to zero, and
the views report host hits the engines then serve."""

from __future__ import annotations

from typing import Any

import pytest

from agentic_kvc.cache.chain_index import ChainedPrefixIndex
from agentic_kvc.cache.tier_index import TieredPrefixIndex
from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.profiles import get_profile
from agentic_kvc.sim.fleet import SimFleet, TieredExactCacheView
from agentic_kvc.workload import load_workload

TIER_AWARE = ["dynamo_kv", "llmd_precise", "llmd_tiered", "predicted_ttft"]


def _cfg(**sets: Any) -> RunConfig:
    base: dict[str, Any] = {
        "backend": "sim",
        "seed": 1,
        "workload": {
            "generator": {
                "preset": "agentic-long",
                "sessions": 16,
                "params": {"session_rate_per_s": 1.0},
            }
        },
        # 3 x H20 with 160k tokens of HBM KV each: 50-150k-token sessions outgrow HBM, a 16 GiB
        # host tier (~175k tokens) keeps what HBM evicts.
        "fleet": {
            "instances": 3,
            "hardware": "h20",
            "model": "qwen3-coder-30b-a3b",
            "kv_cache_tokens": 160_000,
            "kv_tiers": {"host_gib": 16},
        },
    }
    return load_config(base, [f"{k}={v}" for k, v in sets.items()])


def _run(config: RunConfig) -> SimFleet:
    profile = get_profile(config.fleet.hardware, config.fleet.model)
    fleet = SimFleet(config, load_workload(config.workload, config.seed), profile)
    fleet.run()
    return fleet


@pytest.mark.parametrize("view", ["estimated", "exact"])
@pytest.mark.parametrize("name", [*TIER_AWARE, "sticky_least_loaded", "session_ttl"])
def test_tier_aware_routing_runs_and_its_accounting_balances(name: str, view: str) -> None:
    fleet = _run(_cfg(**{"policy.name": name, "policy.cache_view": view}))
    assert all(r.error is None for r in fleet.records)
    cache = fleet.state.cache
    if view == "exact":
        assert isinstance(cache, TieredExactCacheView)
    elif name in TIER_AWARE:
        assert isinstance(cache, TieredPrefixIndex)
    else:  # a session-affinity router never asks for tiers: the HBM estimate alone
        assert type(cache) is ChainedPrefixIndex
    for inst in fleet.state.instances:  # every routed reload was released at its first token
        assert inst.num_requests == inst.pending_prefill_tokens == 0
        assert inst.pending_host_reload_tokens == inst.pending_disk_reload_tokens == 0
    assert sum(r.host_tokens or 0 for r in fleet.records) > 0  # the host tier served hits


def test_the_estimated_tier_view_knows_where_its_sessions_went() -> None:
    # The router's own model sees host hits on the instances that then serve host hits.
    fleet = _run(_cfg(**{"policy.name": "dynamo_kv"}))
    cache = fleet.state.cache
    assert isinstance(cache, TieredPrefixIndex)
    held = [cache.tier_blocks(i) for i in range(3)]
    assert all(t.hbm > 0 for t in held) and sum(t.host for t in held) > 0
