"""The reference model for `sim.blocks`: the per-block pool it replaced (issue 16), unchanged.

Kept for the property tests (`test_sim_blocks.py`), which drive both with the same random
operations and compare what the engine can observe. Its own docstring follows.

The KV block pool of one simulated instance: vLLM v1's prefix cache, block for block.

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

from collections import OrderedDict
from collections.abc import Sequence


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1: {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.hash_of: list[int | None] = [None] * num_blocks
        self.ref = [0] * num_blocks  # requests holding each block
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
        # Set by `release_first`: a block can then be reused before blocks that continue its
        # prefix, so the cached set is no longer prefix-closed and `count_hit` walks.
        self.holes = False

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
        if self.holes:  # vLLM's walk, block by block, to the first miss
            return next((j for j in range(n) if hashes[j] not in cached), n)
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
        cached = self.cached
        return [cached[h] for h in hashes[: self.count_hit(hashes, max_blocks)]]

    def evictable(self, block_ids: Sequence[int]) -> int:
        ref = self.ref
        return sum(1 for b in block_ids if ref[b] == 0)

    def touch(self, block_ids: Sequence[int]) -> None:
        free, ref = self.free, self.ref
        for b in block_ids:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks from the head of the free queue (caller checked `num_free`)."""
        fresh = min(n, self.num_blocks - self.next_fresh)
        out = list(range(self.next_fresh, self.next_fresh + fresh))
        self.next_fresh += fresh
        hash_of, cached, dups = self.hash_of, self.cached, self.dups
        popitem = self.free.popitem
        evicted = 0
        for _ in range(n - fresh):
            b = popitem(last=False)[0]
            h = hash_of[b]
            if h is not None:  # reusing a cached block: its content leaves the cache
                hash_of[b] = None
                if h in dups:  # another block still holds h: it stays cached
                    self._uncache_dup(b, h)
                else:
                    del cached[h]
                    evicted += 1
            out.append(b)
        ref = self.ref
        for b in out:
            ref[b] = 1
        self.evictions += evicted
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
        cached, hash_of = self.cached, self.hash_of
        for b, h in zip(block_ids, hashes, strict=True):
            if h in cached:
                self.dups.setdefault(h, []).append(b)
            else:
                cached[h] = b
            hash_of[b] = h

    def release(self, block_ids: Sequence[int]) -> None:
        free, ref = self.free, self.ref
        for b in reversed(block_ids):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None

    def release_first(self, block_ids: Sequence[int]) -> None:
        """`release`, but the blocks no one holds go to the head of the free queue, in the
        order `release` would queue them."""
        free, ref = self.free, self.ref
        freed = []
        for b in reversed(block_ids):
            ref[b] -= 1
            if ref[b] == 0:
                freed.append(b)
        for b in reversed(freed):
            free[b] = None
            free.move_to_end(b, last=False)
        self.holes = self.holes or bool(block_ids)

    def reset(self) -> None:
        """Drop every cached hash (vLLM's reset_prefix_cache); blocks in use are kept."""
        for b, h in enumerate(self.hash_of):
            if h is not None:
                self.hash_of[b] = None
        self.cached.clear()
        self.dups.clear()
