"""Our Redis encoder-cache connector behind vLLM's EC-transfer API (`vllm.distributed.ec_transfer`).

Loaded by module path, without forking vLLM: start E with
`--ec-transfer-config '{"ec_connector": "RedisECTransfer", "ec_role": "ec_producer",
"ec_connector_module_path": "agentic_kvc.epd.vllm_ec_connector",
"ec_connector_extra_config": {"redis_url": "redis://127.0.0.1:PORT"}}'` and PD with the same but
`"ec_role": "ec_consumer"` (`ec_transfer_args` builds it). Several E and PD instances share one
Redis server.

How vLLM 0.32 drives a connector, and what this one does at each call:
- E worker, `save_caches(encoder_cache, mm_hash)`: right after the vision encoder ran. The
  embedding goes to Redis under `<prefix>:ec:<mm_hash>` (a header naming shape and dtype, then
  `.npy` float32 bytes: no pickle, bf16 round-trips exactly), with a TTL. This runs inside E's
  step, so the data is stored before E answers the proxy.
- PD scheduler, `has_cache_item(mm_hash)`: asked while scheduling a request's image. True when
  the key exists; vLLM then allocates PD encoder-cache space for it (our design's
  preallocation: space first, data second) and calls `update_state_after_alloc`, which queues
  the load; `build_connector_meta` hands the step's loads to the worker. False (not stored, or
  Redis unreachable: logged once) makes PD encode the image itself, so a missing E costs speed,
  not correctness.
- PD worker, `start_load_caches(encoder_cache)`: fetches each queued embedding into vLLM's
  encoder cache before the step's forward pass. A key that vanished between the two (TTL, Redis
  restart) raises `ECTransportError` naming the key and server.

Difference from the design's push protocol (`epd/ec_transport.py`: metadata -> preallocation
notice -> data to one named PD): vLLM's API is pull-shaped (PD asks, by content hash, while it
schedules), so the store is keyed by `mm_hash`, and any PD can use any E's output (an image seen
before is not encoded again by E either: its scheduler asks the same question). Space on PD is
vLLM's own encoder-cache manager's; entries in Redis expire after `ttl_s` (default 600 s).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from vllm.distributed.ec_transfer.ec_connector.base import (
    ECConnectorBase,
    ECConnectorMetadata,
    ECConnectorRole,
)

from agentic_kvc.epd.ec_transport import ECTransportError, pack_message, unpack_message

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

# Under vLLM's logger, so its handler prints these in the engine's log (tests read them there).
log = logging.getLogger("vllm.agentic_kvc.ec_redis")
CONNECTOR_NAME = "RedisECTransfer"
MODULE_PATH = __name__


def ec_transfer_args(role: str, redis_url: str, prefix: str = "epd", ttl_s: int = 600) -> list[str]:
    """vLLM CLI flags that load this connector in `role` (ec_producer | ec_consumer)."""
    if role not in ("ec_producer", "ec_consumer", "ec_both"):
        raise ValueError(f"ec role {role!r}: expected ec_producer, ec_consumer or ec_both")
    cfg = {
        "ec_connector": CONNECTOR_NAME,
        "ec_role": role,
        "ec_connector_module_path": MODULE_PATH,
        "ec_connector_extra_config": {"redis_url": redis_url, "prefix": prefix, "ttl_s": ttl_s},
    }
    return ["--ec-transfer-config", json.dumps(cfg)]


def encode_tensor(t: torch.Tensor) -> bytes:
    """(header, float32 .npy) for one embedding; the header keeps the original dtype."""
    import io

    arr = t.detach().to("cpu").float().numpy()
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return pack_message({"dtype": str(t.dtype).removeprefix("torch.")}, buf.getvalue())


def decode_tensor(raw: bytes, device: Any = "cpu") -> torch.Tensor:
    import io

    import torch

    head, payload = unpack_message(raw)
    arr = np.load(io.BytesIO(payload), allow_pickle=False)
    return torch.from_numpy(arr).to(device=device, dtype=getattr(torch, head["dtype"]))


@dataclass
class RedisECMetadata(ECConnectorMetadata):
    loads: list[str] = field(default_factory=list)  # mm hashes the worker fetches this step


class RedisECTransfer(ECConnectorBase):
    def __init__(self, vllm_config: VllmConfig, role: ECConnectorRole) -> None:
        import redis

        super().__init__(vllm_config=vllm_config, role=role)
        cfg = vllm_config.ec_transfer_config
        assert cfg is not None  # the base class checked
        self.url = str(cfg.get_from_extra_config("redis_url", ""))
        if not self.url:
            raise ValueError(
                "ec_transfer_config.ec_connector_extra_config.redis_url is required for "
                f"{CONNECTOR_NAME} (e.g. redis://127.0.0.1:6379)"
            )
        self.prefix = str(cfg.get_from_extra_config("prefix", "epd"))
        self.ttl_s = int(cfg.get_from_extra_config("ttl_s", 600))
        self._redis = redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2)
        self._errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
        self._pending: list[str] = []
        self._warned = False
        self.saved = 0  # counters, for logs and tests
        self.loaded = 0

    def _key(self, mm_hash: str) -> str:
        return f"{self.prefix}:ec:{mm_hash}"

    def _error(self, what: str, exc: Exception) -> ECTransportError:
        return ECTransportError(
            f"{CONNECTOR_NAME}: {what}: Redis at {self.url} unreachable "
            f"({type(exc).__name__}: {exc}); was redis-server stopped or restarted?"
        )

    # -- E (producer) worker -----------------------------------------------------------------
    def save_caches(self, encoder_cache: dict[str, torch.Tensor], mm_hash: str, **kw: Any) -> None:
        if not self.is_producer:
            return
        data = encode_tensor(encoder_cache[mm_hash])
        try:
            self._redis.set(self._key(mm_hash), data, ex=self.ttl_s)
        except self._errors as exc:
            raise self._error(f"storing {mm_hash}", exc) from exc
        self.saved += 1
        log.info("EC stored %s (%d bytes), %d so far", mm_hash, len(data), self.saved)

    # -- PD (consumer) scheduler -------------------------------------------------------------
    def has_cache_item(self, identifier: str) -> bool:
        try:
            return bool(self._redis.exists(self._key(identifier)))
        except self._errors as exc:
            if not self._warned:  # PD encodes locally instead; say so once, not every step
                log.warning("%s; encoding locally", self._error("lookup", exc))
                self._warned = True
            return False

    def update_state_after_alloc(self, request: Request, index: int) -> None:
        if self.is_consumer:
            self._pending.append(request.mm_features[index].identifier)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> ECConnectorMetadata:
        meta = RedisECMetadata(loads=self._pending)
        self._pending = []
        return meta

    # -- PD (consumer) worker ----------------------------------------------------------------
    def start_load_caches(self, encoder_cache: dict[str, torch.Tensor], **kw: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, RedisECMetadata)
        wanted = [h for h in meta.loads if h not in encoder_cache]
        if not wanted:
            return
        try:
            raws = self._redis.mget([self._key(h) for h in wanted])
        except self._errors as exc:
            raise self._error(f"loading {wanted}", exc) from exc
        from vllm.platforms import current_platform

        device = current_platform.device_type
        if current_platform.is_cuda_alike():  # this worker's GPU, not always cuda:0
            device = f"{device}:{current_platform.current_device()}"
        for mm_hash, raw in zip(wanted, raws, strict=True):
            if raw is None:
                raise ECTransportError(
                    f"{CONNECTOR_NAME}: {self._key(mm_hash)} is gone from Redis at {self.url} "
                    f"(expired after {self.ttl_s} s, or the server restarted) after the "
                    "scheduler saw it"
                )
            encoder_cache[mm_hash] = decode_tensor(raw, device)
            self.loaded += 1
            log.info("EC loaded %s (%d bytes), %d so far", mm_hash, len(raw), self.loaded)
