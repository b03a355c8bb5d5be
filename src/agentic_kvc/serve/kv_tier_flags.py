"""`fleet.kv_tiers` as vLLM engine flags (issue 30): a host or disk KV tier below HBM.

Both builds use vLLM's `SimpleCPUOffloadConnector` (0.32): its scheduler side picks the blocks
to store, keeps the tier's LRU pool, finds hits after the HBM prefix and publishes KV events
with the tier's medium ("CPU" for host memory, "STORAGE" for disk); its worker copies blocks.

- CPU build: the worker's CUDA copies cannot run, so `serve.host_copy_offload_connector` (a subclass
  with host copies, loaded by `kv_connector_module_path`) takes its place.
- CUDA build: vLLM's class as shipped. The same JSON works there without the module path;
  vLLM's own shorthand `--kv-offloading-size GIB --kv-offloading-backend native` (with
  `VLLM_USE_SIMPLE_KV_OFFLOAD=1`; without it, the `OffloadingConnector`) gives a host tier.
  Not run here (no GPU): docs/kv_tiers_real.md.

Mapping (one tier at a time: the connector has one backend):
- `host_gib` -> `kv_offload_backend: cpu`, `cpu_bytes_to_use` = host_gib GiB.
- `disk_gib` -> `kv_offload_backend: disk`, `disk_capacity_bytes`, `disk_path` =
  `{fleet.kv_tiers.disk_path}/akvc-kv-{index}` (the connector appends `.rank_0`).
- `write_through` -> `lazy_offload: false` (store every computed block as its step ends);
  otherwise `lazy_offload: true` (each step, store the blocks a cursor walks over in HBM's free
  queue: up to `lazy_walk_blocks`, from the queue's head or where the last walk stopped).
  Measured on a real engine (benchmarks/tier_store_timing_real.py, docs/kv_tiers.md): when a walk
  is shorter than the pool and copies finish within their step (the CPU engine's host copies),
  a prompt freed at once gets only one walk's worth of blocks stored, its tail;
  `lazy_walk_note` says so in the fleet's plan.
- `eviction: lru` only: the connector's pool is LRU.
- `kv_load_failure_policy: recompute`: a block the tier fails to give back is recomputed,
  never served wrong and never an error to the client.

With a PD connector (NIXL) on the same instance the two are wrapped in vLLM's
`MultiConnector`: NIXL first (a decode request's `kv_transfer_params` load from P), then the
tier; vLLM's MultiConnector loads from the first child that reports matched tokens and saves to
all of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from agentic_kvc.cache.tier_store import lazy_walk_blocks
from agentic_kvc.config import FleetConfig, KVTiersConfig

TIER_CONNECTOR = "SimpleCPUOffloadConnector"
TIER_CPU_MODULE = "agentic_kvc.serve.host_copy_offload_connector"
KV_TRANSFER_FLAG = "--kv-transfer-config"
GIB = 2**30


class KVTierConfigError(ValueError):
    """`fleet.kv_tiers` asks for something the real engines cannot do (names the field)."""


def disk_file(tiers: KVTiersConfig, index: int) -> str:
    """The disk tier's file prefix for instance `index` (one file per instance)."""
    if not tiers.disk_path:
        raise KVTierConfigError(
            "fleet.kv_tiers.disk_path is empty: a disk tier on real engines needs a directory"
        )
    return os.path.join(tiers.disk_path, f"akvc-kv-{index}")


def check_disk_path(tiers: KVTiersConfig) -> None:
    """Fail before any engine starts when the disk tier's directory cannot be made or written
    (the engine would otherwise die while starting, its reason deep in its log)."""
    if tiers.disk_gib <= 0:
        return
    path = disk_file(tiers, 0)
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise KVTierConfigError(
            f"fleet.kv_tiers.disk_path {tiers.disk_path!r} cannot be created: {exc}"
        ) from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise KVTierConfigError(f"fleet.kv_tiers.disk_path {tiers.disk_path!r} is not writable")


def kv_tier_transfer_config(
    tiers: KVTiersConfig, index: int, device: str = "cpu"
) -> dict[str, Any]:
    """The `--kv-transfer-config` object of instance `index` for its KV tier."""
    problem = tiers.real_engine_problem()  # (a run config was refused at load)
    if problem:
        raise KVTierConfigError(problem)
    extra: dict[str, Any] = {"lazy_offload": not tiers.write_through}
    if tiers.host_gib > 0:
        extra |= {"kv_offload_backend": "cpu", "cpu_bytes_to_use": int(tiers.host_gib * GIB)}
    else:
        extra |= {
            "kv_offload_backend": "disk",
            "disk_path": disk_file(tiers, index),
            "disk_capacity_bytes": int(tiers.disk_gib * GIB),
        }
    cfg: dict[str, Any] = {
        "kv_connector": TIER_CONNECTOR,
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": extra,
    }
    if device == "cpu":
        cfg["kv_connector_module_path"] = TIER_CPU_MODULE
    return cfg


def lazy_walk_note(fleet: FleetConfig) -> str | None:
    """A plan note when a lazy tier's walk may not reach every freed block: the walk is shorter
    than the HBM pool (or the pool is sized by GPU memory, unknown here). After a walk that
    stores its last block, that block returns to the free queue's tail and the cursor with it,
    so later walks see only blocks freed after it; the rest of a prompt freed at once is never
    stored unless the cursor restarts (docs/kv_tiers.md, "When the lazy mode stores")."""
    tiers = fleet.kv_tiers
    if not tiers.enabled or tiers.write_through:
        return None
    walk = lazy_walk_blocks(fleet.max_num_batched_tokens, fleet.block_size)
    blocks = fleet.kv_cache_blocks
    if blocks is None:
        pool = "a pool sized by GPU memory"
    elif walk >= blocks:
        return None
    else:
        pool = f"{blocks} HBM blocks"
    return (
        f"lazy KV offload walks {walk} blocks per step over {pool}: where copies finish within "
        f"their step (the CPU engine), vLLM 0.32 stores only the last {walk} blocks of a prompt "
        "freed at once (docs/kv_tiers.md, 'When the lazy mode stores'); "
        "fleet.kv_tiers.write_through: true stores every block"
    )


def _find_flag(args: Sequence[str]) -> tuple[int, int] | None:
    """(start, count) of the last `--kv-transfer-config` in args (`X V` or `X=V`)."""
    for k in range(len(args) - 1, -1, -1):
        if args[k] == KV_TRANSFER_FLAG and k + 1 < len(args):
            return k, 2
        if args[k].startswith(KV_TRANSFER_FLAG + "="):
            return k, 1
    return None


def combine(existing: dict[str, Any], tier: dict[str, Any]) -> dict[str, Any]:
    """One MultiConnector config: the instance's connector (e.g. NIXL) first, then the tier."""
    if existing.get("kv_connector") == "MultiConnector":
        children = list(existing.get("kv_connector_extra_config", {}).get("connectors", []))
    else:
        children = [existing]
    # MultiConnector passes its own engine_id to every child; one in a child is an error
    # ("got multiple values for keyword argument 'engine_id'", vLLM 0.32).
    children = [{k: v for k, v in c.items() if k != "engine_id"} for c in children]
    role = existing.get("kv_role", "kv_both")
    out: dict[str, Any] = {
        "kv_connector": "MultiConnector",
        "kv_role": role,
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"connectors": [*children, tier]},
    }
    if "engine_id" in existing:
        out["engine_id"] = existing["engine_id"]
    return out


def with_kv_tier(
    args: Sequence[str], tiers: KVTiersConfig, index: int, device: str = "cpu"
) -> list[str]:
    """An instance's args with its KV tier added: a `--kv-transfer-config` of its own, or,
    where the args already name a connector, both under vLLM's MultiConnector."""
    tier = kv_tier_transfer_config(tiers, index, device)
    out = list(args)
    found = _find_flag(out)
    if found is None:
        return [*out, KV_TRANSFER_FLAG, json.dumps(tier)]
    start, count = found
    text = out[start + 1] if count == 2 else out[start].split("=", 1)[1]
    try:
        existing = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KVTierConfigError(f"{KV_TRANSFER_FLAG} is not JSON ({exc}): {text[:120]}") from exc
    out[start : start + count] = [KV_TRANSFER_FLAG, json.dumps(combine(existing, tier))]
    return out
