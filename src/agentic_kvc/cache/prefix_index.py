"""Prefix-cache indexes: which leading blocks of a request each instance holds.

`EstimatedPrefixIndex` is the router's own guess (SGLang's and llm-d's "approximate" mode,
Dynamo's insert-on-route fallback): every routed prompt is recorded for the instance that
prefilled it, each instance keeps an LRU of block hashes with a capacity (its KV cache size in
blocks) and a TTL, and nothing is learned from the engines.

`BlockIndex` is a plain hash -> instances map with explicit add / remove / clear per instance,
for views fed by the engines themselves (vLLM KV events: BlockStored, BlockRemoved,
AllBlocksCleared); see `cache/kv_events.py`.

Both answer `matched_tokens(request, n_instances)`: for each instance, the number of leading
prompt tokens (whole blocks of `request.block_size`) it holds, which is what vLLM's prefix
cache would reuse.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from agentic_kvc.policy.base import RequestView


class EstimatedPrefixIndex:
    """Per-instance LRU of router block hashes with a capacity and a TTL.

    Why it can answer in ~13 probes per instance: block hashes are chained (a block's key
    fixes its whole prefix), and `record` touches a prompt's blocks tail first, so within one
    call every block is touched after all its descendants. A block is therefore never older
    (in LRU order or by touch time) than any block that extends it, and both LRU eviction and
    TTL expiry drop descendants no later than their ancestors: each instance's set stays
    prefix-closed. For a request, "block j is held" is then monotone in j (held up to some m,
    absent after), and a binary search finds m.

    This mirrors vLLM, which frees a finished request's blocks tail first, so its free queue
    also evicts prompt tails before heads. What the estimate cannot know: blocks still pinned by
    running requests (vLLM evicts only free blocks), the engine's real capacity after
    fragmentation, preemptions, and prompts the router did not route (e.g. after a restart).
    Hash collisions aside, answers are exact for the LRU model itself.
    """

    def __init__(
        self,
        n_instances: int,
        capacity_blocks: int | None = None,
        ttl_s: float | None = None,
    ) -> None:
        if n_instances < 0:
            raise ValueError(f"n_instances must be >= 0, got {n_instances}")
        if capacity_blocks is not None and capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1 or None, got {capacity_blocks}")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0 or None, got {ttl_s}")
        self.capacity_blocks = capacity_blocks
        self.ttl_s = ttl_s
        # hash -> last touch time; insertion order is LRU order (oldest first).
        self._lru: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(n_instances)]
        self._now = float("-inf")

    @property
    def n_instances(self) -> int:
        return len(self._lru)

    def _ensure(self, instance: int) -> OrderedDict[int, float]:
        if instance < 0:
            raise IndexError(f"instance index must be >= 0, got {instance}")
        while instance >= len(self._lru):
            self._lru.append(OrderedDict())
        return self._lru[instance]

    def advance(self, now: float) -> None:
        """Move the index clock (for TTL) without recording anything; time never goes back."""
        if now > self._now:
            self._now = now

    def _cutoff(self) -> float:
        return float("-inf") if self.ttl_s is None else self._now - self.ttl_s

    def record(self, instance: int, block_hashes: Sequence[int], now: float) -> None:
        """The router sent a prompt with these full blocks to `instance` at time `now`."""
        self.advance(now)
        lru = self._ensure(instance)
        t = self._now
        pop = lru.pop
        for h in reversed(block_hashes):  # tail first: see the class docstring
            pop(h, None)
            lru[h] = t
        self._evict(lru)

    def _evict(self, lru: OrderedDict[int, float]) -> None:
        if self.capacity_blocks is not None:
            while len(lru) > self.capacity_blocks:
                lru.popitem(last=False)
        cutoff = self._cutoff()
        while lru:
            h, t = next(iter(lru.items()))
            if t >= cutoff:
                break
            del lru[h]

    def clear(self, instance: int) -> None:
        """Forget everything about an instance (restarted, or its cache was reset)."""
        self._ensure(instance).clear()

    def blocks(self, instance: int) -> int:
        """Blocks currently believed cached on `instance` (TTL-expired ones excluded)."""
        lru = self._ensure(instance)
        self._evict(lru)
        return len(lru)

    def matched_blocks(self, block_hashes: Sequence[int], n_instances: int) -> list[int]:
        nb = len(block_hashes)
        cutoff = self._cutoff()
        out = [0] * n_instances
        if nb == 0:
            return out
        first, last = block_hashes[0], block_hashes[-1]
        for i in range(min(n_instances, len(self._lru))):
            get = self._lru[i].get
            t = get(first)
            if t is None or t < cutoff:
                continue  # the common case: this instance never saw the prompt's head
            t = get(last)
            if t is not None and t >= cutoff:
                out[i] = nb
                continue
            lo, hi = 1, nb - 1  # invariant: block lo-1 held, block hi absent
            while lo < hi:
                mid = (lo + hi + 1) // 2
                t = get(block_hashes[mid - 1])
                if t is not None and t >= cutoff:
                    lo = mid
                else:
                    hi = mid - 1
            out[i] = lo
        return out

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        bs = request.block_size
        return [m * bs for m in self.matched_blocks(request.block_hashes, n_instances)]


class BlockIndex:
    """Block hash -> set of instances holding it, maintained explicitly per instance.

    Matching walks the request's blocks from the head and stops, per instance, at the first
    block that instance lacks, exactly as vLLM's prefix lookup does. Instances are tracked as
    bits of one int, so a walk costs one dict lookup per block for all instances together,
    and stops as soon as no instance is still matching.
    """

    def __init__(self, n_instances: int = 0) -> None:
        self._where: dict[int, int] = {}
        self._held: list[set[int]] = [set() for _ in range(n_instances)]

    @property
    def n_instances(self) -> int:
        return len(self._held)

    def _ensure(self, instance: int) -> set[int]:
        if instance < 0:
            raise IndexError(f"instance index must be >= 0, got {instance}")
        while instance >= len(self._held):
            self._held.append(set())
        return self._held[instance]

    def add(self, instance: int, block_hashes: Iterable[int]) -> None:
        held = self._ensure(instance)
        bit = 1 << instance
        where = self._where
        for h in block_hashes:
            if h not in held:
                held.add(h)
                where[h] = where.get(h, 0) | bit

    def remove(self, instance: int, block_hashes: Iterable[int]) -> None:
        held = self._ensure(instance)
        bit = 1 << instance
        where = self._where
        for h in block_hashes:
            if h in held:
                held.discard(h)
                rest = where[h] & ~bit
                if rest:
                    where[h] = rest
                else:
                    del where[h]

    def clear(self, instance: int) -> None:
        self.remove(instance, list(self._ensure(instance)))

    def blocks(self, instance: int) -> int:
        return len(self._ensure(instance))

    def holders(self, block_hash: int) -> list[int]:
        mask = self._where.get(block_hash, 0)
        return [i for i in range(mask.bit_length()) if mask >> i & 1]

    def matched_blocks(self, block_hashes: Sequence[int], n_instances: int) -> list[int]:
        out = [0] * n_instances
        alive = (1 << n_instances) - 1
        where = self._where
        for j, h in enumerate(block_hashes):
            still = alive & where.get(h, 0)
            dropped = alive & ~still
            while dropped:
                low = dropped & -dropped
                out[low.bit_length() - 1] = j
                dropped ^= low
            alive = still
            if not alive:
                return out
        n = len(block_hashes)  # still alive: every block matched
        while alive:
            low = alive & -alive
            out[low.bit_length() - 1] = n
            alive ^= low
        return out

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        bs = request.block_size
        return [m * bs for m in self.matched_blocks(request.block_hashes, n_instances)]
