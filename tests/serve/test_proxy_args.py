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


def test_serve_with_a_config_starts_the_proxy_as_akvc_run_would(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Before: `akvc serve vllm --config X --proxy` took only the policy's name and parameters
    from X, so an exact cache view, a tier view or a timeout in X was silently not applied."""
    import json

    import yaml
    from click.testing import CliRunner

    from agentic_kvc.cli import main

    data = {
        "workload": {"generator": {}},
        "fleet": {
            "instances": 2,
            "model": str(tiny_model),
            "block_size": 32,
            "kv_tiers": {"host_gib": 0.0625},
        },
        "policy": {"name": "predicted_ttft", "cache_view": "exact"},
        "replay": {"request_timeout_s": 42},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    cmd = ["serve", "vllm", "--config", str(path), "--device", "cpu", "--dry-run"]
    res = CliRunner().invoke(main, [*cmd, "--proxy"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    events = [a for s in out["specs"] for a in s["argv"] if a.startswith('{"enable_kv_cache')]
    endpoints = [json.loads(e)["endpoint"] for e in events]
    assert len(endpoints) == 2
    want = proxy_args_for(load_config(data))
    assert out["proxy_args"] == [*want, "--kv-events", endpoints[0], "--kv-events", endpoints[1]]
    assert _parsed(out["proxy_args"])["cache_view"] == "exact"

    data["policy"]["cache_view"] = "estimated"  # the tier modelled from the engines' flags
    path.write_text(yaml.safe_dump(data))
    out = json.loads(CliRunner().invoke(main, [*cmd, "--proxy"]).output)
    assert _parsed(out["proxy_args"])["tier_view"] is True
    assert not any(a.startswith('{"enable_kv_cache') for s in out["specs"] for a in s["argv"])
    plain = json.loads(CliRunner().invoke(main, cmd).output)  # no proxy: no proxy flags
    assert "proxy_args" not in plain


def test_serve_checks_the_proxys_policy_before_starting_engines(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Before: a policy the proxy would refuse (pools beyond the fleet, or a config's
    parameters carried over to another `--policy`) failed only once the engines were up."""
    import json

    import yaml
    from click.testing import CliRunner

    from agentic_kvc.cli import main

    data = {
        "workload": {"generator": {}},
        "fleet": {"instances": 2, "model": str(tiny_model), "block_size": 32},
        "policy": {"name": "static_pd", "params": {"prefill": [0], "decode": [1]}},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    cmd = ["serve", "vllm", "--config", str(path), "--device", "cpu", "--dry-run", "--proxy"]
    other = CliRunner().invoke(main, [*cmd, "--policy", "round_robin"])
    assert other.exit_code == 0, other.output  # static_pd's pools are not round_robin's
    assert "proxy_args" in json.loads(other.output)
    beyond = CliRunner().invoke(main, [*cmd, "--param", "decode=[5]"])
    assert beyond.exit_code == 1 and "Traceback" not in beyond.output
    assert "--param: static_pd pool indices [5] out of range for a fleet of 2" in beyond.output
