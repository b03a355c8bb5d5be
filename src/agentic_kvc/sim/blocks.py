"""The KV block pool of one simulated instance: vLLM v1's prefix cache, kept as runs of blocks.

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

Runs, not blocks (issue 16). Nothing the engine observes depends on a block's id, only on
which hashes are cached, how many blocks are free and in which order free blocks are reused.
So blocks are kept as `Piece`s: runs of consecutive chain positions of one request, all with
the same reference count, that moved together so far. A request's `BlockTable` is its hashed
pieces in position order plus a count of unhashed blocks at its end (the partial last block,
blocks allocated ahead of their tokens). The free queue is a linked list of pieces, each
queued tail first (highest position first), so reuse eats a piece from its high end. A prefix
hit on part of a piece splits it (`_carve`), which is rare: hits end where the earlier request's
prompt ended, and that is where its cached run ended too. Per request the cost is O(pieces),
plus one C-level dict update per newly hashed or reused block (`cached` maps a hash to the
piece holding it, for lookups). `tests/sim/block_pool_ref.py` is the per-block model this
replaced; property tests hold the two to the same observable behaviour.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from itertools import pairwise, repeat

HashesOf = Callable[[int, int], list[int]]  # hashes of chain positions [lo, hi)


class Piece:
    """Blocks holding chain positions [lo, hi) of one request. `hashes`: theirs (None:
    unhashed, positions then just count blocks); `owner`: the table that hashed them, which
    alone may grow the piece. `children`: what it was split into while held (its holders still
    list it; releasing it releases them)."""

    __slots__ = ("children", "hashes", "hi", "lo", "next", "owner", "prev", "ref")

    def __init__(
        self, hashes: list[int] | None, lo: int, hi: int, ref: int, owner: object = None
    ) -> None:
        self.hashes = hashes
        self.owner = owner
        self.lo = lo
        self.hi = hi
        self.ref = ref
        self.children: list[Piece] | None = None
        self.prev: Piece | None = None
        self.next: Piece | None = None

    def leaves(self) -> list[Piece]:
        if self.children is None:
            return [self]
        return [leaf for c in self.children for leaf in c.leaves()]


class BlockTable:
    """One request's blocks: `pieces` (hashed, position order), then `n_unhashed` blocks."""

    __slots__ = ("n_hashed", "n_unhashed", "pieces")

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self.n_hashed = 0
        self.n_unhashed = 0

    def __len__(self) -> int:
        return self.n_hashed + self.n_unhashed


class Hit:
    """A prefix hit: chain positions [0, n) of `hashes`, in groups [a, b) held by one piece."""

    __slots__ = ("groups", "hashes", "n")

    def __init__(self, hashes: Sequence[int], n: int, groups: list[tuple[int, int]]) -> None:
        self.hashes = hashes
        self.n = n
        self.groups = groups


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1: {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.cached: dict[int, Piece] = {}  # block hash -> the piece whose block is found by it
        # Other pieces with a block of the same content (two requests prefilled it at once):
        # vLLM keeps a hash cached while any block holds it, and so must we, or the
        # prefix-closure below would break. Rare; every path that meets one goes block by block.
        self.dups: dict[int, list[Piece]] = {}
        # The free queue. vLLM's starts with every block in id order and appends freed blocks
        # at its tail, so never-used blocks are always its head: they are kept as a count.
        self.next_fresh = 0
        self._queue = Piece(None, 0, 0, 0)  # sentinel of the circular list of free pieces
        self._queue.prev = self._queue.next = self._queue
        self._queued = 0  # blocks in the queued pieces
        self.evictions = 0  # cached blocks reused for other content

    @property
    def num_free(self) -> int:
        return self._queued + self.num_blocks - self.next_fresh

    @property
    def usage(self) -> float:
        """vLLM's kv_cache_usage: the fraction of blocks not in the free queue."""
        return 1.0 - self.num_free / self.num_blocks

    # ---- the free queue -------------------------------------------------------------

    def _enqueue(self, p: Piece, before: Piece | None = None) -> None:
        """Link `p` at the queue's tail, or just before `before`."""
        nxt = before or self._queue
        prv = nxt.prev
        assert prv is not None
        p.prev, p.next = prv, nxt
        prv.next = nxt.prev = p
        self._queued += p.hi - p.lo

    def _dequeue(self, p: Piece) -> None:
        prv, nxt = p.prev, p.next
        assert prv is not None and nxt is not None
        prv.next, nxt.prev = nxt, prv
        p.prev = p.next = None
        self._queued -= p.hi - p.lo

    # ---- lookups --------------------------------------------------------------------

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

    def lookup(self, hashes: Sequence[int], max_blocks: int | None = None) -> Hit:
        """The longest cached prefix of `hashes` (at most `max_blocks`), by piece."""
        n = self.count_hit(hashes, max_blocks)
        cached, dups = self.cached, self.dups
        groups: list[tuple[int, int]] = []
        j = n - 1
        while j >= 0:
            p = cached[hashes[j]]
            a = p.lo
            if dups and not dups.keys().isdisjoint(hashes[a : j + 1]):
                # A hash held twice: the lookup takes each hash's first holder, which need not
                # be this piece; group block by block.
                a = j
                while a > p.lo and cached[hashes[a - 1]] is p:
                    a -= 1
            groups.append((a, j + 1))
            j = a - 1
        groups.reverse()
        return Hit(hashes, n, groups)

    def evictable(self, hit: Hit) -> int:
        """Blocks of `hit` now in the free queue (taking them leaves that many fewer free)."""
        cached, hashes = self.cached, hit.hashes
        return sum(b - a for a, b in hit.groups if cached[hashes[a]].ref == 0)

    # ---- a request's blocks ---------------------------------------------------------

    def take(self, table: BlockTable, hit: Hit) -> None:
        """Start an empty `table` with the blocks of `hit` (touching them: in use again)."""
        assert not len(table), "a prefix hit starts a request's blocks"
        cached, hashes = self.cached, hit.hashes
        for a, b in hit.groups:
            p = cached[hashes[a]]  # looked up again: an earlier group's split may have moved it
            if a != p.lo or b != p.hi:
                p = self._carve(p, a, b)
            if p.ref == 0:
                self._dequeue(p)
            p.ref += 1
            table.pieces.append(p)
        table.n_hashed = hit.n

    def allocate(self, table: BlockTable, n: int) -> None:
        """Add `n` blocks from the head of the free queue to `table` (caller checked
        `num_free`)."""
        table.n_unhashed += n
        fresh = min(n, self.num_blocks - self.next_fresh)
        self.next_fresh += fresh
        n -= fresh
        head = self._queue
        while n:
            p = head.next
            assert p is not None and p is not head, "allocate beyond num_free"
            k = min(n, p.hi - p.lo)
            if p.hashes is not None:  # reusing cached blocks: their content leaves the cache
                self._uncache(p, p.hi - k, p.hi)
            if k == p.hi - p.lo:
                self._dequeue(p)
            else:
                p.hi -= k
                self._queued -= k
            n -= k

    def cache(self, table: BlockTable, full: int, hashes_of: HashesOf, seal: int = -1) -> None:
        """Make the table's blocks up to `full` findable by their hashes (`hashes_of`).

        A new piece starts at position `seal` (the prompt's end): a later turn of the session
        hits the prompt's blocks, not the answer's, so its hit then ends at a piece boundary
        instead of splitting a piece.
        """
        start = table.n_hashed
        if full <= start:
            return
        if start < seal < full:
            self.cache(table, seal, hashes_of)
            start = seal
        hashes = hashes_of(start, full)
        pieces = table.pieces
        last = pieces[-1] if pieces else None
        if (
            start != seal
            and last is not None
            and last.owner is table
            and last.hashes is not None
            and last.hi == start
            and last.ref == 1
            and last.children is None
        ):
            p = last  # the request's own run so far: it grows (no one else holds it)
            p.hi = full
            p.hashes.extend(hashes)
        else:
            p = Piece(hashes, start, full, 1, table)
            pieces.append(p)
        cached = self.cached
        if cached.keys().isdisjoint(hashes):
            cached.update(zip(hashes, repeat(p)))
        else:
            dups = self.dups
            for h in hashes:
                if h in cached:
                    dups.setdefault(h, []).append(p)
                else:
                    cached[h] = p
        table.n_unhashed -= full - start
        table.n_hashed = full

    def release(self, table: BlockTable) -> None:
        """Drop the table's references; blocks no one holds join the free queue, tail first."""
        if table.n_unhashed:
            self._enqueue(Piece(None, 0, table.n_unhashed, 0))
        for p in reversed(table.pieces):
            for leaf in reversed(p.leaves()):
                leaf.ref -= 1
                if leaf.ref == 0:
                    self._enqueue(leaf)
        table.pieces = []
        table.n_hashed = table.n_unhashed = 0

    def reset(self) -> None:
        """Drop every cached hash (vLLM's reset_prefix_cache); blocks in use are kept."""
        for p in {*self.cached.values(), *(p for ps in self.dups.values() for p in ps)}:
            p.hashes = None
        self.cached.clear()
        self.dups.clear()

    # ---- internals ------------------------------------------------------------------

    def _uncache(self, p: Piece, lo: int, hi: int) -> None:
        """Positions [lo, hi) of piece p are reused: their hashes leave the cache."""
        assert p.hashes is not None
        hashes = p.hashes[lo - p.lo : hi - p.lo]
        del p.hashes[lo - p.lo :]  # the caller cuts the piece to [p.lo, lo)
        cached, dups = self.cached, self.dups
        if not dups or dups.keys().isdisjoint(hashes):
            deque(map(cached.__delitem__, hashes), maxlen=0)
            self.evictions += hi - lo
            return
        for h in reversed(hashes):  # queue order: tail first
            others = dups.get(h)
            if others is None:
                del cached[h]
                self.evictions += 1
                continue
            if cached[h] is p:  # another block still holds h: it stays cached
                cached[h] = others.pop()
            else:
                others.remove(p)
            if not others:
                del dups[h]

    def _carve(self, p: Piece, a: int, b: int) -> Piece:
        """Split piece p so that positions [a, b) are one piece; returns that piece.

        A free piece is replaced in the queue by its parts (queued tail first, as it was); a
        held one keeps its place in its holders' tables and lists the parts as its children.
        """
        assert p.hashes is not None and p.children is None and p.lo <= a < b <= p.hi
        bounds = sorted({p.lo, a, b, p.hi})
        parts = [
            Piece(p.hashes[lo - p.lo : hi - p.lo], lo, hi, p.ref, p.owner)
            for lo, hi in pairwise(bounds)
        ]
        if p.ref == 0:
            after = p.next
            self._dequeue(p)
            for part in reversed(parts):
                self._enqueue(part, before=after)
        else:
            p.children = parts
        p.hashes = None  # the parts hold them now
        cached, dups = self.cached, self.dups
        for part in parts:
            hashes = part.hashes
            assert hashes is not None
            if not dups or dups.keys().isdisjoint(hashes):
                cached.update(zip(hashes, repeat(part)))
                continue
            for h in hashes:
                if cached[h] is p:
                    cached[h] = part
                else:
                    others = dups[h]
                    others[others.index(p)] = part
        return next(part for part in parts if part.lo == a)
