"""Every NIXL fleet on CPU loads the re-pinning connector; GPU fleets keep vLLM's class."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agentic_kvc.serve.kv_transfer_flags import (
    NIXL_CPU_MODULE,
    kv_launch,
    kv_launch_for_run,
    kv_transfer_config,
)


def _cfgs(args: list[list[str]]) -> list[dict]:
    return [json.loads(a[a.index("--kv-transfer-config") + 1]) for a in args]


def test_cpu_nixl_fleets_name_the_repinning_module() -> None:
    assert NIXL_CPU_MODULE == "agentic_kvc.serve.pinned_nixl_connector"
    assert importlib.util.find_spec(NIXL_CPU_MODULE) is not None  # vLLM imports it by name
    for roles in (None, ["prefill", "decode"]):
        cfgs = _cfgs(kv_launch(2, "nixl", roles=roles, device="cpu").args)
        assert [c["kv_connector_module_path"] for c in cfgs] == [NIXL_CPU_MODULE] * 2
        # vLLM takes the class by this name from the module; its own checks look for it too.
        assert {c["kv_connector"] for c in cfgs} == {"NixlConnector"}
    # The path a real run takes (`akvc run`, the study's adaptive v2 runs).
    run = kv_launch_for_run("adaptive", {"version": 2}, "estimated", 2, device="cpu")
    assert run is not None
    assert {c["kv_connector_module_path"] for c in _cfgs(run.args)} == {NIXL_CPU_MODULE}


def test_gpu_and_other_connectors_keep_vllms_class() -> None:
    for cfg in _cfgs(kv_launch(2, "nixl", device="cuda").args):
        assert "kv_connector_module_path" not in cfg and cfg["kv_buffer_device"] == "cuda"
    assert "kv_connector_module_path" not in kv_transfer_config("mooncake", "kv_both", 0, "cpu")


def test_the_module_holds_a_vllm_nixl_subclass_the_lifecycle_logger_extends() -> None:
    pytest.importorskip("vllm")
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import (
        NixlConnector as VllmNixl,
    )

    from agentic_kvc.lifecycle.logging_nixl_connector import NixlConnector as Logging

    ours = importlib.import_module(NIXL_CPU_MODULE).NixlConnector
    assert issubclass(ours, VllmNixl) and ours is not VllmNixl
    assert issubclass(Logging, ours)  # the lifecycle fleet re-pins through the same class
