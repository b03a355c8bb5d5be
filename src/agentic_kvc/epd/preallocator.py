"""PD-side preallocation, synchronous strategy, and the scheduler glue around it (docs/epd.md).

The E instance announces each multimodal input's encoder-cache size (metadata). The PD side
answers every announcement exactly once: *accepted* (space reserved; send the data) or
*declined* (no need to send: the input's tokens are already computed, e.g. from the prefix
cache, or the request ended). Announcements wait in a first-come-first-served queue until the
encoder cache has room.

`SyncPreallocator` keeps the per-request state (active requests, inputs done / total, metadata
that arrived before its request, queued candidates, declined entries); `PDEncoderCache` joins it
to an `EncoderCacheManager` the way the PD scheduler does. Metadata arrives on connector
threads, so both take one lock; everything else runs on the scheduler's thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from agentic_kvc.epd.cache_manager import EncoderCacheManager, Key


@dataclass(frozen=True)
class MMInput:
    """A multimodal input's placeholder span in the prompt (token offset and length)."""

    offset: int
    length: int


@dataclass(frozen=True)
class Metadata:
    """E -> PD: input `input_id` of `req_id` has `size` encoder tokens ready at `source`."""

    req_id: str
    input_id: int
    size: int
    source: str  # the E instance that holds the data (where the notice goes)

    @property
    def key(self) -> Key:
        return (self.req_id, self.input_id)


@dataclass(frozen=True)
class Notice:
    """PD -> E: preallocation result for one input; `accepted=False` means "do not send"."""

    req_id: str
    input_id: int
    target: str  # the E instance to tell
    accepted: bool
    pd: str = ""  # the PD instance that answers (where the data must go)

    @property
    def key(self) -> Key:
        return (self.req_id, self.input_id)


class SyncPreallocator:
    def __init__(self, pd_name: str = "pd0") -> None:
        self.pd_name = pd_name
        self._lock = threading.RLock()
        self._inputs: dict[str, list[MMInput]] = {}  # active requests
        self._done: dict[str, int] = {}  # leading inputs whose tokens are computed
        self._waiting: dict[str, list[Metadata]] = {}  # metadata before its request
        self._queue: deque[Metadata] = deque()  # FCFS preallocation candidates
        self._pending: set[Key] = set()  # keys in _queue
        self._answered: set[Key] = set()  # keys already accepted or declined
        self._finished: set[str] = set()  # ended requests: later metadata is declined
        self._notices: list[Notice] = []

    # -- request lifecycle (scheduler thread) ------------------------------------------------
    def add_request(self, req_id: str, inputs: Sequence[MMInput], num_computed: int = 0) -> None:
        with self._lock:
            if req_id in self._inputs:
                raise ValueError(f"request {req_id!r} added twice")
            self._finished.discard(req_id)
            self._inputs[req_id] = list(inputs)
            self._done[req_id] = 0
            self._advance(req_id, num_computed)
            for meta in self._waiting.pop(req_id, []):
                self._consider(meta)

    def update_mm_inputs_done(self, req_id: str, num_computed: int) -> list[int]:
        """Mark inputs whose whole span lies within the computed tokens; the newly done ones.

        A newly done input still queued is declined: its tokens no longer need its embedding.
        """
        with self._lock:
            if req_id not in self._inputs:
                return []
            return self._advance(req_id, num_computed)

    def finish_request(self, req_id: str) -> None:
        """Forget a finished or aborted request; its queued or early metadata is declined."""
        with self._lock:
            self._inputs.pop(req_id, None)
            self._done.pop(req_id, None)
            self._finished.add(req_id)
            for meta in self._waiting.pop(req_id, []):
                self._decline(meta)
            for meta in [m for m in self._queue if m.req_id == req_id]:
                self._queue.remove(meta)
                self._pending.discard(meta.key)
                self._decline(meta)
            self._answered = {k for k in self._answered if k[0] != req_id}

    # -- connector thread --------------------------------------------------------------------
    def receive_metadata(self, meta: Metadata) -> None:
        with self._lock:
            if meta.key in self._answered or meta.key in self._pending:
                return  # a duplicate announcement: answered once already
            if meta.req_id in self._finished:
                self._decline(meta)
            elif meta.req_id not in self._inputs:
                self._waiting.setdefault(meta.req_id, []).append(meta)
            else:
                self._consider(meta)

    # -- queries -----------------------------------------------------------------------------
    def is_needed(self, req_id: str, input_id: int) -> bool:
        with self._lock:
            return req_id in self._inputs and input_id >= self._done[req_id]

    def mm_inputs_done(self, req_id: str) -> tuple[int, int]:
        with self._lock:
            return self._done.get(req_id, 0), len(self._inputs.get(req_id, ()))

    def get_prealloc_candidate(self, free_slots: int, fill_next: bool = False) -> Metadata | None:
        """Pop the next candidate that fits in `free_slots`: the queue head (strict FCFS), or
        with `fill_next` the first fitting one further back; None if none fits."""
        with self._lock:
            for meta in self._queue:
                if meta.size <= free_slots:
                    self._queue.remove(meta)
                    self._pending.discard(meta.key)
                    self._answered.add(meta.key)
                    return meta
                if not fill_next:
                    return None
            return None

    def accept(self, meta: Metadata) -> None:
        with self._lock:
            self._notices.append(
                Notice(meta.req_id, meta.input_id, meta.source, True, self.pd_name)
            )

    def take_notices(self) -> list[Notice]:
        with self._lock:
            out, self._notices = self._notices, []
            return out

    def outbox(self) -> list[Notice]:
        """Notices decided but not yet taken by the connector."""
        with self._lock:
            return list(self._notices)

    def queued(self) -> list[Metadata]:
        with self._lock:
            return list(self._queue)

    def unanswered(self) -> set[Key]:
        """Announced inputs not yet accepted or declined (queued, or before their request)."""
        with self._lock:
            early = {m.key for metas in self._waiting.values() for m in metas}
            return early | self._pending

    # -- internals (lock held) ---------------------------------------------------------------
    def _advance(self, req_id: str, num_computed: int) -> list[int]:
        inputs, newly = self._inputs[req_id], []
        while self._done[req_id] < len(inputs):
            mm = inputs[self._done[req_id]]
            if mm.offset + mm.length > num_computed:
                break
            newly.append(self._done[req_id])
            self._done[req_id] += 1
        for meta in [m for m in self._queue if m.req_id == req_id and m.input_id in newly]:
            self._queue.remove(meta)
            self._pending.discard(meta.key)
            self._decline(meta)
        return newly

    def _consider(self, meta: Metadata) -> None:
        if meta.input_id < self._done[meta.req_id]:
            self._decline(meta)  # covered by computed (prefix-cached) tokens: no need to send
        else:
            self._queue.append(meta)
            self._pending.add(meta.key)

    def _decline(self, meta: Metadata) -> None:
        self._answered.add(meta.key)
        self._notices.append(Notice(meta.req_id, meta.input_id, meta.source, False, self.pd_name))


class PDEncoderCache:
    """The PD scheduler's view: preallocate as space allows, finalize on injection, free."""

    def __init__(self, capacity: int, pd_name: str = "pd0", fill_next: bool = False) -> None:
        self.manager = EncoderCacheManager(capacity)
        self.prealloc = SyncPreallocator(pd_name)
        self.fill_next = fill_next

    def add_request(self, req_id: str, inputs: Sequence[MMInput], num_computed: int = 0) -> None:
        self.prealloc.add_request(req_id, inputs, num_computed)

    def perform_preallocations(self) -> list[Notice]:
        """Reserve space for queued candidates while they fit; the notices to send."""
        while True:
            meta = self.prealloc.get_prealloc_candidate(self.manager.num_free, self.fill_next)
            if meta is None:
                break
            self.manager.preallocate(meta.req_id, meta.input_id, meta.size)
            self.prealloc.accept(meta)
        return self.prealloc.take_notices()

    def on_injected(self, req_id: str, input_id: int) -> bool:
        """Data arrived: finalize if still needed, else give the reservation back.

        False when there is no reservation (the request ended meanwhile): the data is dropped.
        """
        if not self.manager.is_preallocated(req_id, input_id):
            return False
        if self.prealloc.is_needed(req_id, input_id):
            self.manager.finalize_allocation(req_id, input_id)
            return True
        self.manager.depreallocate(req_id, input_id)
        return False

    def on_tokens_computed(self, req_id: str, num_computed: int) -> None:
        """Inputs now fully computed no longer need their cached embedding: free it."""
        for input_id in self.prealloc.update_mm_inputs_done(req_id, num_computed):
            if self.manager.is_cached(req_id, input_id):
                size = self.manager.cached()[(req_id, input_id)]
                self.manager.deallocate(req_id, input_id, size)

    def drop_reservations(self) -> int:
        """The transport failed: data for reservations will not come; free them. Slots freed."""
        freed = 0
        for req_id, input_id in self.manager.preallocated():
            freed += self.manager.depreallocate(req_id, input_id)
        return freed

    def ready(self, req_id: str, input_id: int) -> bool:
        return self.manager.is_cached(req_id, input_id)

    def finish_request(self, req_id: str) -> list[Notice]:
        """Finish or abort: free all the request's space; decline what was still queued."""
        self.manager.free_request(req_id)
        self.prealloc.finish_request(req_id)
        return self.prealloc.take_notices()
