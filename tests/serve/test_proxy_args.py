"""The proxy arguments a run config fixes (serve.run_backend.proxy_args_for): the vLLM backend and
the routers-real instrument both start their proxies with them, and the proxy's CLI reads them
back as the config's values."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.instruments.routers_real import _proxy_args
from agentic_kvc.proxy.cli import proxy
from agentic_kvc.serve.run_backend import proxy_args_for

BASE = Path(__file__).resolve().parents[2] / "config" / "runs" / "sim_h20_agentic.yaml"


def _parsed(args: list[str]) -> dict:
    ctx = proxy.make_context("proxy", ["--engine", "http://127.0.0.1:1", *args])
    return ctx.params


def test_the_proxy_reads_back_the_configs_view_interval_timeout_and_roles() -> None:
    cfg = load_config(
        BASE,
        [
            "fleet.instances=2",
            "fleet.roles=[prefill,decode]",
            "policy.cache_view=exact",
            "sim.scrape_interval_s=0.25",
            "replay.request_timeout_s=42",
        ],
    )
    got = _parsed(proxy_args_for(cfg))
    assert got["cache_view"] == "exact" and got["scrape_interval"] == 0.25
    assert got["upstream_timeout"] == 42.0 and list(got["roles"]) == ["prefill", "decode"]
    plain = load_config(BASE, [])
    assert "--role" not in proxy_args_for(plain)  # no roles, no --role
    assert _parsed(proxy_args_for(plain))["finish_first"] is False
    first = load_config(BASE, ["sim.finish_first=true"])  # on real engines too
    assert _parsed(proxy_args_for(first))["finish_first"] is True


def test_routers_real_starts_its_proxies_with_the_same_arguments() -> None:
    cfg = load_config(BASE, ["replay.request_timeout_s=7"])
    assert _proxy_args(cfg) == proxy_args_for(cfg)
    with pytest.raises(ValueError, match="routers-real"):
        _proxy_args(load_config(BASE, ["fleet.instances=2", "fleet.roles=[prefill,decode]"]))


def test_a_fleet_with_a_kv_tier_gets_the_tier_view_in_the_estimated_view_only() -> None:
    tiers = ["fleet.kv_tiers.host_gib=4", "fleet.max_num_batched_tokens=2048"]
    got = _parsed(proxy_args_for(load_config(BASE, tiers)))
    assert got["tier_view"] is True and got["engine_max_num_batched_tokens"] == 2048
    exact = _parsed(proxy_args_for(load_config(BASE, [*tiers, "policy.cache_view=exact"])))
    assert exact["tier_view"] is False  # the exact view reads the tier from KV events
    assert _parsed(proxy_args_for(load_config(BASE, [])))["tier_view"] is False
