"""A waiting request's cached prefix made the most recent free KV when it arrives, on a real vLLM
engine (the simulator's `sim.refresh_on_arrival`).

vLLM looks up a request's prefix hit only when it schedules the request
(`KVCacheManager.get_computed_blocks`, from `Scheduler.schedule`); until then the hit's blocks
stay where they are in the free queue, usually near its head when the session's previous turn
ended a tool pause ago, and the requests admitted ahead of it can take them. This vLLM general
plugin wraps `Scheduler.add_request`: once vLLM has queued a new request, the free blocks of its
current prefix hit (`coordinator.find_longest_cache_hit`, the lookup `get_computed_blocks` makes,
without its statistics or events) leave their place in the free queue and rejoin it at the tail
in the order vLLM frees a request's blocks (tail first), as if just released. Nothing is pinned
or allocated: a block in use is left alone, and the request is scheduled exactly as before; only
which free blocks an allocation takes first changes (older ones before an imminent hit).
docs/kv_tiers/study_followups.md ("Refreshing a waiting request's prefix") has the simulated
study behind it.

Loaded by vLLM from the `vllm.general_plugins` entry point in every vLLM process; it patches
only where `AKVC_REFRESH_ON_ARRIVAL=1` is in the engine's environment (a run config's
`sim.refresh_on_arrival` sets it on real engines; `fleet.vllm_env` can too), so engines started
otherwise run vLLM unchanged. Written against vLLM 0.32; on a vLLM without these internals it
logs why and patches nothing.
"""

from __future__ import annotations

import os
from typing import Any

from agentic_kvc.serve.vllm_internals import announce, v1_scheduler

ENV = "AKVC_REFRESH_ON_ARRIVAL"

_patched = False


def refresh_blocks(pool: Any, blocks: list[Any]) -> int:
    """Move the free blocks among `blocks` (one request's prefix hit, in position order) to the
    tail of `pool`'s free queue, the prompt's tail first (its head is then reused last).
    Returns how many moved."""
    free = [b for b in blocks if b.ref_cnt == 0 and not b.is_null]
    queue = pool.free_block_queue
    for b in free:
        queue.remove(b)
    queue.append_n(free[::-1])
    return len(free)


def refresh_hit(manager: Any, request: Any) -> int:
    """Refresh `request`'s current prefix hit in `manager`'s block pool (every KV cache group);
    0 where vLLM would not look it up (prefix caching off, or the request skips the cache)."""
    if not manager.prefix_cache_lookup_enabled(request):
        return 0
    groups, _tokens, _uncached = manager.coordinator.find_longest_cache_hit(
        request.block_hashes, request.num_tokens - 1
    )
    return sum(refresh_blocks(manager.block_pool, blocks) for blocks in groups)


def patch_scheduler() -> bool:
    """Wrap `Scheduler.add_request` (idempotent). False where vLLM lacks the hooks."""
    global _patched
    if _patched:
        return True
    Scheduler = v1_scheduler(ENV, ("add_request",), ("prefix_cache_lookup_enabled",))
    if Scheduler is None:
        return False
    plain = Scheduler.add_request

    def add_request(self: Any, request: Any) -> None:
        known = request.request_id in self.requests  # a streamed input's next chunk
        plain(self, request)
        if not known:
            refresh_hit(self.kv_cache_manager, request)

    Scheduler.add_request = add_request  # type: ignore[method-assign]
    _patched = True
    announce(ENV, "Scheduler.add_request")
    return True


def register() -> None:
    """The `vllm.general_plugins` entry point: patch only where the engine's env asks."""
    if os.environ.get(ENV) == "1":
        patch_scheduler()
