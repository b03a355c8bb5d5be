"""`backend: vllm` end to end with fake engines standing in for vLLM (fast, no real engine)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.io import read_jsonl
from agentic_kvc.runs import execute, is_complete
from agentic_kvc.serve import run_backend
from agentic_kvc.serve.launcher import FleetPlan, InstanceSpec, VllmFleet
from agentic_kvc.serve.ports import free_port


def _fake_fleet(fleet_cfg, log_dir, device="auto", **_kw) -> VllmFleet:
    specs = []
    for i in range(fleet_cfg.instances):
        port = free_port()
        argv = [sys.executable, "-m", "agentic_kvc.proxy.fake_engine", "--port", str(port)]
        specs.append(InstanceSpec(i, port, argv, env={}))
    return VllmFleet(FleetPlan("cpu", "fake", "fake-model", specs), log_dir)


def test_vllm_backend_run_writes_a_complete_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(run_backend.VllmFleet, "from_config", staticmethod(_fake_fleet))
    monkeypatch.setattr(run_backend, "token_fn", lambda _d: lambda r: [7] * r.input_tokens)
    cfg = load_config(
        {
            "backend": "vllm",
            "workload": {
                "generator": {"preset": "agentic-coding", "sessions": 3},
                "token_scale": 0.02,
                "time_scale": 0.01,
            },
            "fleet": {"instances": 2},
            "policy": {"name": "unified"},
            "sim": {"sample_interval_s": 0.05},
        }
    )
    run_dir = execute(cfg, tmp_path)
    assert is_complete(run_dir)
    recs = list(read_jsonl(run_dir / "requests.jsonl"))
    assert recs and all(r["error"] is None for r in recs)
    assert all(r["policy"] == "unified" and r["route_class"] for r in recs)
    assert all(r["ttft_s"] is not None and r["e2e_s"] >= r["ttft_s"] for r in recs)
    # the proxy's breakdown was merged onto the run clock: sent upstream after the client sent
    assert all(r["t_prefill_sent"] is not None for r in recs)
    assert all(r["t_prefill_sent"] >= r["t_proxy_recv"] - 0.001 for r in recs)
    samples = list(read_jsonl(run_dir / "instances.jsonl"))
    assert {s["instance"] for s in samples} == {0, 1}
    assert any(s["prefix_cache_queries"] for s in samples)  # engine counters were scraped
    assert all(s["router_inflight"] is not None for s in samples)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    info = manifest["backend_info"]
    assert info["proxy"]["n_records"] == len(recs)
    assert [i["log"] for i in info["fleet"]["instances"]] == [
        str(run_dir / "logs" / "vllm-0.log"),
        str(run_dir / "logs" / "vllm-1.log"),
    ]
    assert (run_dir / "logs" / "proxy.log").is_file()
    assert abs(info["clock"]["proxy_offset_s"]) < 60
    # The machine's load over the run, and over the replay as its own (shorter) window.
    load = info["host_load"]
    assert load["loadavg_start"]["load1"] >= 0 and load["loadavg_end"] is not None
    assert load["run"]["overall"]["busy"] >= 0 and "steal" in load["run"]["overall"]
    assert 0 < load["replay"]["duration_s"] <= load["duration_s"] <= manifest["wall_s"] + 1


def test_missing_tiny_model_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    from agentic_kvc.serve.launcher import LaunchError

    monkeypatch.setenv("AKVC_TINY_MODEL", str(tmp_path / "absent"))
    cfg = load_config(
        {
            "backend": "vllm",
            "workload": {"generator": {"sessions": 1}},
            "fleet": {"instances": 1, "block_size": 32},
        }
    )
    with pytest.raises(LaunchError, match="make model"):
        run_backend.run_vllm(cfg, tmp_path)
