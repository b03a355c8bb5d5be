"""vLLM launch flags for KV transfer (NIXL, Mooncake) and KV events, per instance and role.

Roles. Offload policies (`adaptive` v2, `elastic`) may prefill a request on any instance and
decode it on any other, so every instance both produces and consumes KV (`kv_both`, the
default). A static xPyD fleet (`static_pd`) gives prefill instances `kv_producer` and decode
instances `kv_consumer`, as in vLLM's disaggregated-prefill examples.

Connectors:
- NIXL (`NixlConnector`): D pulls P's blocks over NIXL (UCX). On CPU the KV buffer is host
  memory (`kv_buffer_device: cpu`); on GPUs it is the GPU cache itself. Each instance needs
  its own side-channel port (`VLLM_NIXL_SIDE_CHANNEL_PORT`), where D fetches P's metadata.
  On CPU every instance loads the project's subclass (`serve.pinned_nixl_connector`, by
  `kv_connector_module_path`): vLLM's NIXL worker pins its main thread to the machine's last
  core on every instance, so P's busy-wait starved D; the subclass puts the worker's threads
  back on the instance's own core. GPU fleets get vLLM's class unchanged.
- Mooncake (`MooncakeConnector`): the Mooncake transfer engine over RDMA. P registers with a
  bootstrap server (its own, on `VLLM_MOONCAKE_BOOTSTRAP_PORT`); the router names P's engine id
  and bootstrap address in D's request (see `proxy/pd.py`), so engine ids are fixed here.

KV events (the exact cache view, `cache/kv_events.py`) need a ZMQ endpoint per instance, and
block hashes that do not change between processes: a fixed `PYTHONHASHSEED` (vLLM seeds the
first block's parent hash from it) and a CBOR hash (`sha256_cbor`, no pickle-version drift).
vLLM's publisher *binds* only wildcard (`tcp://*:P`) and ipc/inproc endpoints and *connects*
to any other (`tcp://127.0.0.1:P` means "a subscriber has bound there"). Engines here bind an
ipc socket each: local only, no port to collide, and any number of subscribers (the proxy, a
test, a recorder) may connect, before or after the engine starts.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_kvc.policy.base import Role
from agentic_kvc.serve.ports import LOOPBACK, free_port

ConnectorName = Literal["nixl", "mooncake"]
KVRole = Literal["kv_both", "kv_producer", "kv_consumer"]
CONNECTOR_CLASSES: dict[str, str] = {"nixl": "NixlConnector", "mooncake": "MooncakeConnector"}
# The module vLLM loads `NixlConnector` from on CPU (the re-pinning subclass).
NIXL_CPU_MODULE = "agentic_kvc.serve.pinned_nixl_connector"
HASH_SEED = "0"  # any fixed value; the proxy's view never needs to know it (see kv_events.py)
HASH_ALGO = "sha256_cbor"
KV_EVENTS_TOPIC = "kv-events"


def engine_id(index: int) -> str:
    """A fixed engine id per instance: Mooncake's D requests must name P's."""
    return f"akvc-{index}"


def kv_role(role: Role) -> KVRole:
    """The connector role for a fleet role: producer / consumer only for a static PD split."""
    if role == "prefill":
        return "kv_producer"
    if role == "decode":
        return "kv_consumer"
    return "kv_both"


def kv_transfer_config(
    connector: ConnectorName,
    role: KVRole,
    index: int,
    device: str = "cpu",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The `--kv-transfer-config` JSON object of one instance."""
    if connector not in CONNECTOR_CLASSES:
        raise ValueError(f"kv connector {connector!r}: expected one of {sorted(CONNECTOR_CLASSES)}")
    cfg: dict[str, Any] = {
        "kv_connector": CONNECTOR_CLASSES[connector],
        "kv_role": role,
        "engine_id": engine_id(index),
    }
    if connector == "nixl":
        cfg["kv_buffer_device"] = "cpu" if device == "cpu" else "cuda"
        if device == "cpu":
            cfg["kv_connector_module_path"] = NIXL_CPU_MODULE
    if extra:
        cfg["kv_connector_extra_config"] = dict(extra)
    return cfg


def kv_events_config(endpoint: str) -> dict[str, Any]:
    """The `--kv-events-config` JSON object: a ZMQ PUB socket the proxy subscribes to.

    Use an endpoint vLLM binds (`ipc://...` or `tcp://*:PORT`); see the module docstring.
    """
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": endpoint,
        "topic": KV_EVENTS_TOPIC,
    }


@dataclass(slots=True)
class InstanceKV:
    """What one instance was started with, for the proxy (Mooncake peers, KV-event endpoints)."""

    index: int
    role: KVRole | None = None
    engine_id: str | None = None
    side_port: int | None = None  # NIXL side channel or Mooncake bootstrap port
    events_endpoint: str | None = None


@dataclass(slots=True)
class KVLaunch:
    """Per-instance args and env to pass to `serve.launcher.plan_fleet`."""

    args: list[list[str]]
    env: list[dict[str, str]]
    instances: list[InstanceKV] = field(default_factory=list)

    @property
    def events_endpoints(self) -> list[str]:
        return [i.events_endpoint for i in self.instances if i.events_endpoint]

    @property
    def peers(self) -> list[dict[str, str]]:
        """Per instance: Mooncake's `remote_engine_id` and `remote_bootstrap_addr` for D."""
        return [
            {
                "engine_id": i.engine_id or engine_id(i.index),
                "bootstrap_addr": f"{LOOPBACK}:{i.side_port}",
            }
            for i in self.instances
        ]


def kv_launch(
    n_instances: int,
    connector: ConnectorName | None = "nixl",
    roles: Sequence[Role] | None = None,
    device: str = "cpu",
    kv_events: bool = False,
    events_dir: str | None = None,
) -> KVLaunch:
    """Flags and env for a fleet: a KV connector per role and/or a KV-event publisher.

    Side-channel ports are chosen now (free at planning time), one per instance; KV events go
    to one ipc socket per instance in `events_dir` (default: a new temporary directory; keep
    the path short, Unix socket paths are limited to about 100 bytes).
    """
    roles = list(roles) if roles is not None else ["combined"] * n_instances
    if len(roles) != n_instances:
        raise ValueError(f"{len(roles)} roles given for {n_instances} instances")
    out = KVLaunch([[] for _ in range(n_instances)], [{} for _ in range(n_instances)])
    if kv_events and events_dir is None:
        events_dir = tempfile.mkdtemp(prefix="akvc-ev-")
        # The engines are stopped before the process ends; their sockets are not removed
        # by vLLM, so the directory would outlive every run.
        atexit.register(shutil.rmtree, events_dir, True)
    for i in range(n_instances):
        info = InstanceKV(i)
        args, env = out.args[i], out.env[i]
        if connector is not None:
            info.role = kv_role(roles[i])
            info.engine_id = engine_id(i)
            info.side_port = free_port()
            cfg = kv_transfer_config(connector, info.role, i, device)
            args += ["--kv-transfer-config", json.dumps(cfg)]
            if connector == "nixl":
                env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = LOOPBACK
                env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(info.side_port)
            else:
                env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(info.side_port)
        if kv_events:
            ev = kv_events_config(f"ipc://{events_dir}/kv-events-{i}.sock")
            info.events_endpoint = ev["endpoint"]
            args += ["--kv-events-config", json.dumps(ev)]
            args += ["--prefix-caching-hash-algo", HASH_ALGO]
            env["PYTHONHASHSEED"] = HASH_SEED
        out.instances.append(info)
    return out


# Policies whose decisions may put prefill and decode on different instances.
OFFLOAD_POLICIES = frozenset(["elastic", "static_pd", "conditional_disagg", "calibrated_split"])


def may_disaggregate(policy: str, params: dict[str, Any]) -> bool:
    """Whether a run's policy can return PD decisions (so its engines need a KV connector)."""
    return policy in OFFLOAD_POLICIES or (policy == "adaptive" and params.get("version") == 2)


def kv_launch_for_run(
    policy: str,
    params: dict[str, Any],
    cache_view: str,
    n_instances: int,
    roles: Sequence[Role] | None = None,
    device: str = "cpu",
    connector: ConnectorName = "nixl",
    events_dir: str | None = None,
) -> KVLaunch | None:
    """The KV flags a real run needs: a connector if its policy may offload, KV events if it
    routes by the exact view; None when it needs neither. `events_dir`: where the event
    sockets go (default: a new temporary directory); a fleet kept between runs passes its
    own, so that every run launches it with the same flags."""
    offload = may_disaggregate(policy, params)
    events = cache_view == "exact"
    if not (offload or events):
        return None
    return kv_launch(n_instances, connector if offload else None, roles, device, events, events_dir)


def warm_nixl_pairs(
    urls: Sequence[str],
    model: str,
    roles: Sequence[KVRole | None] | None = None,
    prompt: Sequence[int] = tuple(range(100, 164)),
    attempts: int = 3,
    retry_wait_s: float = 1.0,
) -> None:
    """One NIXL exchange per ordered pair of instances, straight to the engines.

    NIXL connects a P-D pair on its first transfer; on a loaded CPU machine that took over
    10 s, long enough for P to drop the blocks it held for D and for D's request to fail. Runs
    and tests measure transfers, not that one-off handshake, so they warm every pair first.
    The handshake itself can time out on a loaded machine (D answers 500, its log says
    `handshake_setup_failed`); the engine retries it on the next transfer, so a failed
    exchange is tried again, `attempts` times in all.
    """
    import httpx

    from agentic_kvc.proxy import pd

    body = {"model": model, "prompt": list(prompt), "max_tokens": 2, "temperature": 0}
    with httpx.Client(timeout=300) as client:
        for p, p_url in enumerate(urls):
            for d, d_url in enumerate(urls):
                # A consumer never prefills for others, a producer never pulls.
                if p == d or (roles and (roles[p] == "kv_consumer" or roles[d] == "kv_producer")):
                    continue
                for attempt in range(1, attempts + 1):
                    try:
                        ans = client.post(p_url + "/v1/completions", json=pd.prefill_body(body))
                        ans.raise_for_status()
                        params = ans.json().get("kv_transfer_params")
                        d_body = pd.decode_body(body, "nixl", params)
                        client.post(d_url + "/v1/completions", json=d_body).raise_for_status()
                        break
                    except httpx.HTTPStatusError:
                        if attempt == attempts:
                            raise
                        time.sleep(retry_wait_s)
