"""Finished sessions' KV reused first, on a real vLLM engine (the simulator's `sim.finish_first`).

vLLM frees a finished request's hashed blocks to the *tail* of its free queue
(`BlockPool.free_blocks` in `vllm/v1/core/block_pool.py`: "FIFO reuse of cached blocks for LRU
eviction"), so the KV of a session that has ended counts as the most recently used and an
allocation evicts paused sessions' older blocks before it. No request parameter or KV
connector can change that order: a connector's `request_finished` only decides *when* the
blocks are freed. This vLLM general plugin wraps the scheduler's `_free_request_blocks` so that
a request carrying `vllm_xargs: {"akvc_release_first": 1}` (the proxy adds it on a session's
last turn with `--finish-first`) frees its blocks to the free queue's *head*
(`FreeKVCacheBlockQueue.prepend_n`), in the order vLLM would have appended them (tail first).
They still hit until an allocation takes them, as `BlockPool.release_first` in `sim/blocks.py`
models. One difference from the simulator: vLLM keeps never-used and unhashed free blocks at
the queue's head too, and `prepend_n` puts the released blocks before them, so here they are
reused before never-used blocks, where the simulator takes never-used blocks first. It matters
only while an engine still has never-used blocks (the first minutes of a large GPU pool; the
tiny CPU engines of the real runs fill within a few requests); inserting after the unhashed
head would need a walk over it per release.

Loaded by vLLM from the `vllm.general_plugins` entry point in every vLLM process; it patches
only where `AKVC_RELEASE_FIRST=1` is set in the engine's environment (serve/launcher.py sets it
on every engine it starts; a request without the flag takes vLLM's own path), so engines started
otherwise run vLLM unchanged. Written against vLLM 0.32; on a
vLLM without these internals it logs why and patches nothing. A request whose blocks vLLM must
free later (`defer_block_free`: a KV consumer with several batches in flight) is freed the
usual way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from agentic_kvc.serve.vllm_internals import announce, v1_scheduler

ENV = "AKVC_RELEASE_FIRST"
XARG = "akvc_release_first"  # the key in SamplingParams.extra_args (the API's `vllm_xargs`)

_patched = False


def release_first(pool: Any, ordered_blocks: Iterable[Any]) -> None:
    """`BlockPool.free_blocks`, but every block no one holds any more goes to the head of the
    free queue, hashed or not, in the given order (the first is reused first)."""
    first: list[Any] = []
    other_pools: dict[Any, list[Any]] = {}
    for block in ordered_blocks:
        if block.pool is not None and block.pool is not pool:
            other_pools.setdefault(block.pool, []).append(block)
            continue
        block.ref_cnt -= 1
        if block.ref_cnt == 0 and not block.is_null:
            first.append(block)
    pool.free_block_queue.prepend_n(first)
    for other, blocks in other_pools.items():
        release_first(other, blocks)


def wants_release_first(request: Any) -> bool:
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) if params is not None else None
    return bool(extra and extra.get(XARG))


def patch_scheduler() -> bool:
    """Wrap `Scheduler._free_request_blocks` (idempotent). False where vLLM lacks the hooks."""
    global _patched
    if _patched:
        return True
    Scheduler = v1_scheduler(ENV, ("_free_request_blocks", "_request_blocks_can_be_freed"))
    if Scheduler is None:
        return False
    plain = Scheduler._free_request_blocks

    def _free_request_blocks(self: Any, request: Any) -> None:
        if not (wants_release_first(request) and self._request_blocks_can_be_freed(request)):
            return plain(self, request)
        manager = self.kv_cache_manager
        # Tail first, as KVCacheManager.free orders them, so the tail is reused first.
        release_first(manager.block_pool, reversed(manager.pop_blocks_for_free(request)))
        return None

    Scheduler._free_request_blocks = _free_request_blocks  # type: ignore[method-assign]
    _patched = True
    announce(ENV, "Scheduler._free_request_blocks")
    return True


def register() -> None:
    """The `vllm.general_plugins` entry point: patch only where the engine's env asks."""
    if os.environ.get(ENV) == "1":
        patch_scheduler()
