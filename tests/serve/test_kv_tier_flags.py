"""`fleet.kv_tiers` -> engine flags (serve/kv_tier_flags.py), and the launcher's use of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_kvc.cache.tier_store import lazy_walk_blocks
from agentic_kvc.config import FleetConfig, KVTiersConfig
from agentic_kvc.serve.kv_tier_flags import (
    TIER_CPU_MODULE,
    KVTierConfigError,
    check_disk_path,
    kv_tier_transfer_config,
    lazy_walk_note,
    with_kv_tier,
)
from agentic_kvc.serve.kv_transfer_flags import kv_transfer_config
from agentic_kvc.serve.launcher import LaunchError, plan_fleet

GIB = 2**30


def _flag(argv: list[str]) -> dict:
    k = argv.index("--kv-transfer-config")
    return json.loads(argv[k + 1])


def test_host_tier_on_cpu_loads_our_connector_by_module_path() -> None:
    cfg = kv_tier_transfer_config(KVTiersConfig(host_gib=0.5), 0, "cpu")
    assert cfg["kv_connector"] == "SimpleCPUOffloadConnector"
    assert cfg["kv_connector_module_path"] == TIER_CPU_MODULE
    assert cfg["kv_load_failure_policy"] == "recompute"
    extra = cfg["kv_connector_extra_config"]
    assert extra == {
        "lazy_offload": True,
        "kv_offload_backend": "cpu",
        "cpu_bytes_to_use": GIB // 2,
    }


def test_cuda_build_gets_vllms_own_class_and_write_through_is_eager() -> None:
    cfg = kv_tier_transfer_config(KVTiersConfig(host_gib=2, write_through=True), 0, "cuda")
    assert "kv_connector_module_path" not in cfg
    assert cfg["kv_connector_extra_config"]["lazy_offload"] is False


def test_disk_tier_has_one_file_per_instance(tmp_path: Path) -> None:
    tiers = KVTiersConfig(disk_gib=1, disk_path=str(tmp_path / "kv"))
    a, b = (kv_tier_transfer_config(tiers, i)["kv_connector_extra_config"] for i in (0, 1))
    assert a["kv_offload_backend"] == "disk" and a["disk_capacity_bytes"] == GIB
    assert a["disk_path"] != b["disk_path"]
    assert a["disk_path"].startswith(str(tmp_path / "kv"))


@pytest.mark.parametrize(
    ("tiers", "field"),
    [
        (KVTiersConfig(), "no tier"),
        (KVTiersConfig(host_gib=1, disk_gib=1, disk_path="/tmp/x"), "both set"),
        (KVTiersConfig(host_gib=1, eviction="retention"), "eviction"),
        (KVTiersConfig(disk_gib=1), "disk_path"),
        (KVTiersConfig(host_gib=1, lazy_store="eviction"), "lazy_store"),
        (KVTiersConfig(host_gib=1, lazy_store="free"), "lazy_store"),
    ],
)
def test_what_real_engines_cannot_do_is_a_clear_error(tiers: KVTiersConfig, field: str) -> None:
    with pytest.raises(KVTierConfigError, match=field):
        kv_tier_transfer_config(tiers, 0)


def test_a_pd_connector_and_the_tier_share_a_multiconnector() -> None:
    nixl = kv_transfer_config("nixl", "kv_producer", 1, "cpu")
    args = ["--foo", "--kv-transfer-config", json.dumps(nixl), "--bar"]
    out = with_kv_tier(args, KVTiersConfig(host_gib=1), 1)
    assert out[0] == "--foo" and out[-1] == "--bar"
    cfg = _flag(out)
    assert cfg["kv_connector"] == "MultiConnector"
    assert cfg["kv_role"] == "kv_producer" and cfg["engine_id"] == nixl["engine_id"]
    children = cfg["kv_connector_extra_config"]["connectors"]
    assert [c["kv_connector"] for c in children] == ["NixlConnector", "SimpleCPUOffloadConnector"]
    assert children[0] == {k: v for k, v in nixl.items() if k != "engine_id"}
    # `--kv-transfer-config=JSON` spelled as one argument is found too.
    one = with_kv_tier([f"--kv-transfer-config={json.dumps(nixl)}"], KVTiersConfig(host_gib=1), 1)
    assert _flag(one) == cfg


def test_launcher_adds_the_tier_only_when_on(tiny_model: Path) -> None:
    base = FleetConfig(instances=2, model=str(tiny_model), block_size=32)
    off = plan_fleet(base, device="cpu")
    assert all("--kv-transfer-config" not in s.argv for s in off.specs)
    on = plan_fleet(base.model_copy(update={"kv_tiers": KVTiersConfig(host_gib=0.25)}), "cpu")
    for spec in on.specs:
        assert _flag(spec.argv)["kv_connector_extra_config"]["cpu_bytes_to_use"] == GIB // 4


def test_disk_path_that_cannot_be_made_fails_before_any_engine_starts(
    tmp_path: Path, tiny_model: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    tiers = KVTiersConfig(disk_gib=1, disk_path=str(blocker / "kv"))
    with pytest.raises(KVTierConfigError, match="cannot be created"):
        check_disk_path(tiers)
    fleet = FleetConfig(instances=1, model=str(tiny_model), block_size=32, kv_tiers=tiers)
    with pytest.raises(LaunchError, match="disk_path"):
        plan_fleet(fleet, device="cpu")


def test_the_connectors_event_media_map_to_tiers() -> None:
    """vLLM's SimpleCPUOffloadConnector publishes "CPU" (host) and "STORAGE" (disk) media."""
    from agentic_kvc.cache.prefix_index import medium_tier

    assert [medium_tier(m) for m in ("GPU", "CPU", "STORAGE")] == ["hbm", "host", "disk"]


def test_plan_notes_a_lazy_walk_shorter_than_the_pool(tiny_model: Path) -> None:
    """vLLM 0.32's lazy walk is 2 x cdiv(max_num_batched_tokens, block_size) blocks; a shorter
    walk than the pool can leave most of a freed prompt unstored (measured), so the plan says so,
    and says nothing when the walk covers the pool or the tier is written through."""
    tier = KVTiersConfig(host_gib=0.25)
    fleet = FleetConfig(instances=1, model=str(tiny_model), block_size=32, kv_tiers=tier)
    short = fleet.model_copy(update={"max_num_batched_tokens": 64, "kv_cache_tokens": 129 * 32})
    assert lazy_walk_blocks(64, 32) == 4
    note = lazy_walk_note(short)
    assert note is not None and "walks 4 blocks per step over 129 HBM blocks" in note
    assert note in plan_fleet(short, device="cpu").notes
    covered = short.model_copy(update={"max_num_batched_tokens": 8192})  # walk 512 >= 129
    assert lazy_walk_note(covered) is None
    eager = short.model_copy(update={"kv_tiers": tier.model_copy(update={"write_through": True})})
    assert lazy_walk_note(eager) is None
    assert not any("lazy KV offload" in n for n in plan_fleet(eager, device="cpu").notes)
    by_memory = short.model_copy(update={"kv_cache_tokens": None})
    assert "a pool sized by GPU memory" in (lazy_walk_note(by_memory) or "")


def test_a_disk_file_without_a_directory_says_which_field() -> None:
    from agentic_kvc.serve.kv_tier_flags import disk_file

    with pytest.raises(KVTierConfigError, match=r"fleet\.kv_tiers\.disk_path is empty"):
        disk_file(KVTiersConfig(disk_gib=1.0), 0)
    assert disk_file(KVTiersConfig(disk_gib=1.0, disk_path="/tmp/kv"), 2) == "/tmp/kv/akvc-kv-2"
