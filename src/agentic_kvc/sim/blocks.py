"""The KV block pool of one simulated instance: vLLM v1's prefix cache, block for block.

As in vLLM v1 (`vllm/v1/core/block_pool.py`, `kv_cache_manager.py`):
- the pool has a fixed number of blocks of `block_size` tokens;
- a full block gets a chained hash (equal hash <=> equal token prefix through that block) and
  stays findable by it until the block is reused for something else;
- blocks whose reference count drops to zero join the tail of a free queue, a request's blocks
  tail first, so a prompt's last blocks are evicted before its head; allocation takes blocks
  from the head of the queue (LRU) and drops their hash from the cache;
- a prefix hit on a free cached block takes it out of the free queue again ("touch").

Block hashes are plain ints: the workload's engine block hashes
(`workload.tokens.engine_block_hashes`) for prompt blocks, unique synthetic ones for blocks that
hold generated tokens (a generated answer never matches a later prompt on a real engine either,
because the engine's tokens are not the workload's).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from itertools import islice, repeat


class BlockPool:
    """Whole-request operations run as C-level bulk dict operations (no per-block Python
    loop) where no block is shared or duplicated; the general per-block path is kept for
    those cases and gives the same result."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1: {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.hash_of: dict[int, int] = {}  # block -> its hash, for blocks holding one
        # Reference counts, kept only where they exceed one: a block in the free queue is held
        # by no request, any other by one plus `extra_refs` (prefix hits share blocks). So a
        # block allocated, used and freed by one request costs no reference-count work.
        self.extra_refs: dict[int, int] = {}
        self.cached: dict[int, int] = {}  # block hash -> a block holding it
        # Other blocks with the same content (two requests prefilled it at once): vLLM keeps a
        # hash cached while any block holds it, and so must we, or the prefix-closure below
        # would break.
        self.dups: dict[int, list[int]] = {}
        # The free queue. vLLM's starts with every block in id order and appends freed blocks
        # at its tail, so never-used blocks are always its head: they are kept as a count
        # (ids `next_fresh` and up), which spares building a queue of a million blocks per
        # instance. `free` holds the freed ones; insertion order is eviction order.
        self.next_fresh = 0
        self.free: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0  # cached blocks reused for other content

    @property
    def num_free(self) -> int:
        return len(self.free) + self.num_blocks - self.next_fresh

    @property
    def usage(self) -> float:
        """vLLM's kv_cache_usage: the fraction of blocks not in the free queue."""
        return 1.0 - self.num_free / self.num_blocks

    def count_hit(self, hashes: Sequence[int], max_blocks: int | None = None) -> int:
        """Length in blocks of the longest cached prefix of `hashes`.

        The cached set is prefix-closed: a block's ancestors are held by every request that
        holds it and are freed with it, after it (tail first), so no block outlives its parent
        in the cache. "Block j is cached" is therefore monotone in j and a binary search finds
        the same prefix as vLLM's block-by-block walk, in ~log2(n) probes.
        """
        n = len(hashes) if max_blocks is None else min(len(hashes), max_blocks)
        cached = self.cached
        if n == 0 or hashes[0] not in cached:
            return 0
        if hashes[n - 1] in cached:
            return n
        lo, hi = 1, n - 1  # block lo-1 cached, block hi not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if hashes[mid - 1] in cached:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def longest_hit(self, hashes: Sequence[int], max_blocks: int | None = None) -> list[int]:
        """Block ids of the longest cached prefix of `hashes` (at most `max_blocks`)."""
        return list(map(self.cached.__getitem__, hashes[: self.count_hit(hashes, max_blocks)]))

    def evictable(self, block_ids: Sequence[int]) -> int:
        """How many of these blocks are free (held by no request)."""
        return sum(map(self.free.__contains__, block_ids))

    def touch(self, block_ids: Sequence[int]) -> None:
        """A request shares these (cached) blocks: free ones leave the free queue."""
        free, extra = self.free, self.extra_refs
        for b in block_ids:
            if b in free:
                del free[b]
            else:
                extra[b] = extra.get(b, 0) + 1

    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks from the head of the free queue (caller checked `num_free`)."""
        fresh = min(n, self.num_blocks - self.next_fresh)
        out = list(range(self.next_fresh, self.next_fresh + fresh))
        self.next_fresh += fresh
        if n > fresh:
            free = self.free
            if n - fresh == len(free):
                reused = list(free)
                free.clear()
            else:
                reused = list(islice(free, n - fresh))
                _consume(map(free.pop, reused))
            # Reusing cached blocks: their content leaves the cache.
            hash_of = self.hash_of
            hashed = list(filter(hash_of.__contains__, reused))
            hashes = list(map(hash_of.pop, hashed))
            dups = self.dups
            if dups and not dups.keys().isdisjoint(hashes):
                cached = self.cached
                for b, h in zip(hashed, hashes, strict=True):
                    if h in dups:  # another block still holds h: it stays cached
                        self._uncache_dup(b, h)
                    else:
                        del cached[h]
                        self.evictions += 1
            else:
                _consume(map(self.cached.__delitem__, hashes))
                self.evictions += len(hashes)
            out += reused
        return out

    def _uncache_dup(self, b: int, h: int) -> None:
        """Drop block b from the holders of hash h, which another block keeps cached."""
        others = self.dups[h]
        if self.cached[h] == b:
            self.cached[h] = others.pop()
        else:
            others.remove(b)
        if not others:
            del self.dups[h]

    def cache(self, block_ids: Sequence[int], hashes: Sequence[int]) -> None:
        """Make full blocks findable by their hashes (pairwise)."""
        if len(block_ids) != len(hashes):
            raise ValueError(f"{len(block_ids)} blocks for {len(hashes)} hashes")
        cached, hash_of = self.cached, self.hash_of
        holder = dict(zip(hashes, block_ids))
        if len(holder) == len(hashes) and cached.keys().isdisjoint(holder):
            cached.update(holder)  # the common case: all new content
        else:
            for b, h in zip(block_ids, hashes):
                if h in cached:
                    self.dups.setdefault(h, []).append(b)
                else:
                    cached[h] = b
        hash_of.update(zip(block_ids, hashes))

    def release(self, block_ids: Sequence[int]) -> None:
        """A request lets go of its blocks; those now unheld join the free queue, tail first."""
        extra = self.extra_refs
        tail_first = block_ids[::-1]
        if not extra or extra.keys().isdisjoint(tail_first):
            freed = tail_first  # the common case: no other request holds any
        else:
            freed = []
            for b in tail_first:
                r = extra.get(b, 0)
                if r == 0:
                    freed.append(b)
                elif r == 1:
                    del extra[b]
                else:
                    extra[b] = r - 1
        self.free.update(zip(freed, repeat(None)))

    def reset(self) -> None:
        """Drop every cached hash (vLLM's reset_prefix_cache); blocks in use are kept."""
        self.hash_of.clear()
        self.cached.clear()
        self.dups.clear()


def _consume(it: Iterator[object]) -> None:
    """Run an iterator of calls to the end at C speed."""
    deque(it, maxlen=0)
