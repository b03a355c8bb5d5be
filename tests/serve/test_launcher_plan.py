"""Fleet plans: flags, per-instance env and binding, placeholders, config extras."""

from __future__ import annotations

import pytest

from agentic_kvc.config import FleetConfig
from agentic_kvc.serve.device import detect_device
from agentic_kvc.serve.launcher import LaunchError, plan_fleet, resolve_model


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_cpu_plan_pins_one_core_per_instance(tiny_model, monkeypatch) -> None:
    monkeypatch.setattr("agentic_kvc.serve.launcher.allowed_cores", lambda: [4, 5])
    fc = FleetConfig(
        instances=3,
        block_size=32,
        kv_cache_tokens=1000,
        vllm_args=["--seed", "{index}"],
        vllm_env={"MY_PORT": "p{port}", "SHARED": "x"},
    )
    plan = plan_fleet(
        fc,
        "cpu",
        extra_args=["--kv-events-config", '{"endpoint": "tcp://127.0.0.1:5{index}0"}'],
        per_instance_args=[["--max-num-seqs", "7"], [], []],
    )
    assert plan.device == "cpu" and len(plan.specs) == 3
    ports = {s.port for s in plan.specs}
    assert len(ports) == 3
    cores = [s.env["VLLM_CPU_OMP_THREADS_BIND"] for s in plan.specs]
    assert cores == ["4", "5", "4"]  # wraps around, with a note
    assert any("share 2 cores" in n for n in plan.notes)
    s0, s2 = plan.specs[0], plan.specs[2]
    assert s0.env["VLLM_TARGET_DEVICE"] == "cpu" and s0.env["HF_HUB_OFFLINE"] == "1"
    assert s0.env["AKVC_RELEASE_FIRST"] == "1"  # serve/vllm_release_first.py: asked per request
    assert s0.env["MY_PORT"] == f"p{s0.port}" and s0.env["SHARED"] == "x"
    assert _flag(s0.argv, "--port") == str(s0.port)
    assert _flag(s0.argv, "--block-size") == "32"
    assert _flag(s0.argv, "--num-gpu-blocks-override") == "32"  # ceil(1000 / 32)
    assert "--enforce-eager" in s0.argv and "--enable-prompt-tokens-details" in s0.argv
    assert _flag(s0.argv, "--load-format") == "dummy"  # tiny model: no weights exist
    assert _flag(s2.argv, "--seed") == "2"
    # JSON braces survive placeholder substitution
    assert _flag(s2.argv, "--kv-events-config") == '{"endpoint": "tcp://127.0.0.1:520"}'
    # per-instance args go last, so they override the shared ones in vLLM's parser
    assert s0.argv[-2:] == ["--max-num-seqs", "7"] and "7" not in s2.argv


def test_spare_cpu_cores_become_frontend_cores(tiny_model, monkeypatch) -> None:
    monkeypatch.setattr("agentic_kvc.serve.launcher.allowed_cores", lambda: [0, 1, 2, 3])
    plan = plan_fleet(FleetConfig(instances=2, block_size=32), "cpu")
    assert [s.env["VLLM_CPU_OMP_THREADS_BIND"] for s in plan.specs] == ["0", "1"]
    assert plan.frontend_cores == [2, 3]
    assert all(s.frontend_cores == [2, 3] for s in plan.specs)
    # as many instances as cores: nothing to spare, every process may run anywhere
    full = plan_fleet(FleetConfig(instances=4, block_size=32), "cpu")
    assert full.frontend_cores is None and full.specs[0].frontend_cores is None
    assert any("no spare core" in n for n in full.notes)


def test_cuda_plan_gives_one_gpu_each(tiny_model) -> None:
    plan = plan_fleet(FleetConfig(instances=2, gpu_memory_utilization=0.5), "cuda")
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in plan.specs] == ["0", "1"]
    assert "VLLM_CPU_OMP_THREADS_BIND" not in plan.specs[0].env
    assert plan.specs[0].env["AKVC_RELEASE_FIRST"] == "1"
    assert _flag(plan.specs[0].argv, "--gpu-memory-utilization") == "0.5"
    assert "--enforce-eager" not in plan.specs[0].argv


def test_bad_inputs_are_clear(tiny_model, tmp_path, monkeypatch) -> None:
    with pytest.raises(ValueError, match="device must be one of"):
        detect_device("tpu")
    with pytest.raises(ValueError, match="1 entries for 2 instances"):
        plan_fleet(FleetConfig(instances=2, block_size=32), "cpu", per_instance_args=[[]])
    # vllm-cpu dies at engine start on block size 16: say so before starting anything
    with pytest.raises(LaunchError, match="block_size 16: the CPU engine needs a multiple of 32"):
        plan_fleet(FleetConfig(instances=1, block_size=16), "cpu")
    monkeypatch.setenv("AKVC_TINY_MODEL", str(tmp_path / "nope"))
    with pytest.raises(LaunchError, match="make model"):
        resolve_model("tiny")


def test_hub_ids_pass_through() -> None:
    assert resolve_model("Qwen/Qwen3-8B") == ("Qwen/Qwen3-8B", False)
