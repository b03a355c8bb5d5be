"""E-side scheduling: encode all of a request's inputs at once, free space only after transfer.

A request on the encode instance finishes as soon as its embeddings exist; the space they
occupy stays allocated until the PD side has received them (transfer done) or declined them.
So the scheduler keeps its own record of what is allocated (`_allocated`), independent of the
request's life.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from agentic_kvc.epd.cache_manager import EncoderCacheManager, Key


@dataclass(frozen=True)
class EncodeJob:
    req_id: str
    sizes: tuple[int, ...]  # encoder tokens per multimodal input

    @property
    def total(self) -> int:
        return sum(self.sizes)


class EncodeScheduler:
    def __init__(self, capacity: int, budget: int) -> None:
        if budget <= 0:
            raise ValueError(f"encoder budget must be > 0, got {budget}")
        self.manager = EncoderCacheManager(capacity)
        self.budget = budget
        self._waiting: deque[EncodeJob] = deque()
        self._allocated: dict[Key, int] = {}

    def add_request(self, req_id: str, sizes: Sequence[int]) -> None:
        job = EncodeJob(req_id, tuple(sizes))
        if job.total > self.manager.capacity:
            raise ValueError(
                f"request {req_id!r} needs {job.total} encoder-cache slots; capacity is "
                f"{self.manager.capacity}: it could never be scheduled"
            )
        self._waiting.append(job)

    def schedule(self) -> list[EncodeJob]:
        """FCFS: take whole requests while their inputs fit in both cache and step budget.

        The first job of a step may exceed the budget alone (else it would starve).
        """
        out: list[EncodeJob] = []
        left = self.budget
        while self._waiting:
            job = self._waiting[0]
            if not self.manager.can_allocate(job.total) or (out and job.total > left):
                break
            self._waiting.popleft()
            for i, size in enumerate(job.sizes):
                self.manager.allocate(job.req_id, i, size)
                self._allocated[(job.req_id, i)] = size
            left -= job.total
            out.append(job)
        return out

    def release(self, keys: Sequence[Key]) -> None:
        """Entries sent (transfer done) or declined by PD: free their space. Unknown keys are
        ignored, so a late duplicate report cannot free twice."""
        for key in keys:
            size = self._allocated.pop(key, None)
            if size is not None:
                self.manager.deallocate(key[0], key[1], size)

    def abort(self, req_id: str) -> None:
        """Drop a waiting request, or free the space of one already encoded."""
        self._waiting = deque(j for j in self._waiting if j.req_id != req_id)
        self.release([k for k in self._allocated if k[0] == req_id])

    def allocated(self) -> dict[Key, int]:
        return dict(self._allocated)

    def num_waiting(self) -> int:
        return len(self._waiting)
