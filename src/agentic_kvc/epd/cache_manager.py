"""Encoder-cache space accounting with two-step allocation (docs/epd.md).

Space is counted in encoder tokens (what one multimodal input's embedding occupies). An entry
is a (request id, input index) pair and lives in exactly one of two places:

- *preallocated*: space reserved on the PD side after the E side announced the input's size,
  before its data has arrived (step one);
- *cached*: space holding data: finalized on the PD side after injection (step two), or
  allocated directly by the E side for the embedding it computes.

`free + sum(preallocated) + sum(cached) == capacity` holds after every call; a call that would
break it (a second preallocation of an entry, freeing what was never reserved, a size that does
not match) raises `CacheAccountingError` and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Key = tuple[str, int]  # (request id, multimodal input index within the request)


class CacheAccountingError(RuntimeError):
    """A call that would leak or double-count encoder-cache space."""


@dataclass
class EncoderCacheManager:
    capacity: int
    _free: int = field(init=False)
    _preallocated: dict[Key, int] = field(init=False, default_factory=dict)
    _cached: dict[Key, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {self.capacity}")
        self._free = self.capacity

    # -- read-only views ---------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self._free

    def preallocated(self) -> dict[Key, int]:
        return dict(self._preallocated)

    def cached(self) -> dict[Key, int]:
        return dict(self._cached)

    def is_preallocated(self, req_id: str, input_id: int) -> bool:
        return (req_id, input_id) in self._preallocated

    def is_cached(self, req_id: str, input_id: int) -> bool:
        return (req_id, input_id) in self._cached

    def entries_of(self, req_id: str) -> list[Key]:
        return [k for k in (*self._preallocated, *self._cached) if k[0] == req_id]

    def check(self) -> None:
        """Raise if the space identity or the one-place rule is broken (tests call this)."""
        used = sum(self._preallocated.values()) + sum(self._cached.values())
        if self._free < 0 or self._free + used != self.capacity:
            raise CacheAccountingError(
                f"free {self._free} + used {used} != capacity {self.capacity}"
            )
        both = set(self._preallocated) & set(self._cached)
        if both:
            raise CacheAccountingError(f"entries both preallocated and cached: {sorted(both)}")

    # -- two-step allocation (PD side) -------------------------------------------------------
    def can_preallocate(self, size: int) -> bool:
        return 0 <= size <= self._free

    def preallocate(self, req_id: str, input_id: int, size: int) -> None:
        key = (req_id, input_id)
        self._require_new(key)
        if size < 0:
            raise CacheAccountingError(f"{key}: negative size {size}")
        if size > self._free:
            raise CacheAccountingError(f"{key}: needs {size} slots, {self._free} free")
        self._preallocated[key] = size
        self._free -= size

    def depreallocate(self, req_id: str, input_id: int) -> int:
        """Give back a reservation whose data is not needed (prefix cache, abort); its size."""
        key = (req_id, input_id)
        if key not in self._preallocated:
            raise CacheAccountingError(f"{key}: not preallocated")
        size = self._preallocated.pop(key)
        self._free += size
        return size

    def finalize_allocation(self, req_id: str, input_id: int) -> None:
        """The data was injected: the reservation becomes a cached entry (no space moves)."""
        key = (req_id, input_id)
        if key not in self._preallocated:
            raise CacheAccountingError(f"{key}: finalize without preallocation")
        self._cached[key] = self._preallocated.pop(key)

    # -- one-step allocation (E side, and local encoding) ------------------------------------
    def can_allocate(self, size: int) -> bool:
        return 0 <= size <= self._free

    def allocate(self, req_id: str, input_id: int, size: int) -> None:
        key = (req_id, input_id)
        self._require_new(key)
        if size < 0 or size > self._free:
            raise CacheAccountingError(f"{key}: cannot allocate {size} slots, {self._free} free")
        self._cached[key] = size
        self._free -= size

    def deallocate(self, req_id: str, input_id: int, size: int) -> None:
        """Free a cached entry after its request finished (E side: once transferred)."""
        key = (req_id, input_id)
        if key not in self._cached:
            raise CacheAccountingError(f"{key}: deallocate of an entry not cached")
        if self._cached[key] != size:
            raise CacheAccountingError(
                f"{key}: deallocate size {size} != allocated {self._cached[key]}"
            )
        del self._cached[key]
        self._free += size

    def free_request(self, req_id: str) -> int:
        """Free every entry of a finished or aborted request, in either state; slots freed."""
        freed = 0
        for key in [k for k in self._preallocated if k[0] == req_id]:
            freed += self._preallocated.pop(key)
        for key in [k for k in self._cached if k[0] == req_id]:
            freed += self._cached.pop(key)
        self._free += freed
        return freed

    def _require_new(self, key: Key) -> None:
        if key in self._preallocated or key in self._cached:
            where = "preallocated" if key in self._preallocated else "cached"
            raise CacheAccountingError(f"{key}: already {where}")
