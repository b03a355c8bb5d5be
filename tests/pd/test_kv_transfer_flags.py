"""Launch flags for KV transfer and KV events, per role, and the proxy CLI that consumes them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agentic_kvc.serve.kv_transfer_flags import kv_launch, kv_role, kv_transfer_config


def _flag(args: list[str], name: str) -> dict:
    return json.loads(args[args.index(name) + 1])


def test_offload_fleet_is_kv_both_with_distinct_side_channels() -> None:
    kv = kv_launch(3, "nixl", device="cpu")
    cfgs = [_flag(a, "--kv-transfer-config") for a in kv.args]
    assert [c["kv_role"] for c in cfgs] == ["kv_both"] * 3
    assert all(c["kv_connector"] == "NixlConnector" for c in cfgs)
    assert all(c["kv_buffer_device"] == "cpu" for c in cfgs)
    assert [c["engine_id"] for c in cfgs] == ["akvc-0", "akvc-1", "akvc-2"]
    ports = [e["VLLM_NIXL_SIDE_CHANNEL_PORT"] for e in kv.env]
    assert len(set(ports)) == 3  # one NIXL side channel per instance
    assert all("--kv-events-config" not in a for a in kv.args)


def test_static_pd_roles_and_gpu_buffer() -> None:
    kv = kv_launch(3, "nixl", roles=["prefill", "prefill", "decode"], device="cuda")
    cfgs = [_flag(a, "--kv-transfer-config") for a in kv.args]
    assert [c["kv_role"] for c in cfgs] == ["kv_producer", "kv_producer", "kv_consumer"]
    assert {c["kv_buffer_device"] for c in cfgs} == {"cuda"}
    assert [kv_role(r) for r in ("combined", "both")] == ["kv_both", "kv_both"]


def test_mooncake_peers_and_kv_events_flags() -> None:
    kv = kv_launch(2, "mooncake", kv_events=True)
    cfg = _flag(kv.args[1], "--kv-transfer-config")
    assert cfg["kv_connector"] == "MooncakeConnector" and "kv_buffer_device" not in cfg
    port = kv.env[1]["VLLM_MOONCAKE_BOOTSTRAP_PORT"]
    assert kv.peers[1] == {"engine_id": "akvc-1", "bootstrap_addr": f"127.0.0.1:{port}"}
    ev = _flag(kv.args[0], "--kv-events-config")
    assert ev["enable_kv_cache_events"] and ev["publisher"] == "zmq"
    assert kv.events_endpoints[0] == ev["endpoint"] and len(set(kv.events_endpoints)) == 2
    assert ev["endpoint"].startswith("ipc://")  # an endpoint vLLM binds, not connects to
    # Stable hashes across processes: a fixed seed and the CBOR hash.
    assert kv.env[0]["PYTHONHASHSEED"] == kv.env[1]["PYTHONHASHSEED"]
    assert kv.args[0][kv.args[0].index("--prefix-caching-hash-algo") + 1] == "sha256_cbor"


def test_events_only_fleet_has_no_connector_and_bad_input_is_named() -> None:
    kv = kv_launch(1, None, kv_events=True)
    assert "--kv-transfer-config" not in kv.args[0] and kv.events_endpoints
    with pytest.raises(ValueError, match="kv connector 'p2p'"):
        kv_transfer_config("p2p", "kv_both", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 roles given for 2 instances"):
        kv_launch(2, roles=["prefill"])


def test_proxy_cli_exact_view_needs_endpoints_and_peers_parse() -> None:
    from agentic_kvc.proxy.cli import proxy

    runner = CliRunner()
    res = runner.invoke(proxy, ["--engine", "http://127.0.0.1:9", "--cache-view", "exact"])
    assert res.exit_code == 2 and "needs --kv-events" in res.output
    res = runner.invoke(
        proxy,
        ["--engine", "http://127.0.0.1:9", "--kv-connector", "mooncake", "--kv-peer", "bad"],
    )
    assert res.exit_code == 2 and "ENGINE_ID@HOST:PORT" in res.output


def test_real_runs_get_a_connector_only_when_the_policy_may_offload() -> None:
    from agentic_kvc.serve.kv_transfer_flags import kv_launch_for_run

    assert kv_launch_for_run("unified", {}, "estimated", 2) is None
    assert kv_launch_for_run("adaptive", {"version": 1}, "estimated", 2) is None
    v2 = kv_launch_for_run("adaptive", {"version": 2}, "estimated", 2)
    assert v2 is not None and all("--kv-transfer-config" in a for a in v2.args)
    assert not v2.events_endpoints
    exact = kv_launch_for_run("unified", {}, "exact", 2)
    assert exact is not None and len(exact.events_endpoints) == 2
    assert all("--kv-transfer-config" not in a for a in exact.args)
    pd = kv_launch_for_run("static_pd", {}, "exact", 2, roles=["prefill", "decode"])
    assert pd is not None
    assert [_flag(a, "--kv-transfer-config")["kv_role"] for a in pd.args] == [
        "kv_producer",
        "kv_consumer",
    ]


def test_warm_pairs_runs_one_exchange_per_allowed_direction(pd_fakes) -> None:
    from agentic_kvc.serve.kv_transfer_flags import warm_nixl_pairs

    urls = [s.url for _, s in pd_fakes]
    warm_nixl_pairs(urls, "m")
    for fake, _ in pd_fakes:  # each was P once and D once
        kinds = sorted(
            "p" if r["kv_transfer_params"].get("do_remote_decode") else "d" for r in fake.requests
        )
        assert kinds == ["d", "p"]
    for fake, _ in pd_fakes:
        fake.requests.clear()
    warm_nixl_pairs(urls, "m", ["kv_producer", "kv_consumer"])
    assert len(pd_fakes[0][0].requests) == 1 and len(pd_fakes[1][0].requests) == 1
    assert pd_fakes[1][0].requests[0]["kv_transfer_params"]["remote_engine_id"] == "fake-0"


def test_default_events_directory_is_removed_when_the_process_ends() -> None:
    # Sockets in a directory made per launch would otherwise pile up in /tmp, one per run.
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from agentic_kvc.serve.kv_transfer_flags import kv_launch\n"
        "kv = kv_launch(1, None, kv_events=True)\n"
        "print(kv.events_endpoints[0].removeprefix('ipc://').rsplit('/', 1)[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    folder = Path(out.stdout.strip())
    assert folder.name.startswith("akvc-ev-") and not folder.exists()
