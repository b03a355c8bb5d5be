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

from agentic_kvc.cache.chain_index import agree_until

HashesOf = Callable[[int, int], list[int]]  # hashes of chain positions [lo, hi)


class Piece:
    """Blocks holding chain positions [lo, hi) of one request. `hashes`: theirs (None:
    unhashed, positions then just count blocks); `owner`: the table that hashed them, which
    alone may grow the piece. `children`: what it was split into while held (its holders still
    list it; releasing it releases them). `below`: KV tiers (sim/tiers.py): its blocks may
    also be stored in a tier below HBM (they were loaded from one)."""

    __slots__ = ("below", "children", "hashes", "hi", "lo", "next", "owner", "prev", "ref")

    def __init__(
        self, hashes: list[int] | None, lo: int, hi: int, ref: int, owner: object = None
    ) -> None:
        self.hashes = hashes
        self.owner = owner
        self.lo = lo
        self.hi = hi
        self.ref = ref
        self.below = False
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
    """A prefix hit: chain positions [0, n) of `hashes`, in groups [a, b) held by one piece
    (`pieces`: those pieces, found by the walk; None when the pool was in per-block mode)."""

    __slots__ = ("groups", "hashes", "n", "pieces")

    def __init__(
        self,
        hashes: Sequence[int],
        n: int,
        groups: list[tuple[int, int]],
        pieces: list[Piece] | None = None,
    ) -> None:
        self.hashes = hashes
        self.n = n
        self.groups = groups
        self.pieces = pieces


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1: {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Which hash is cached, and in which piece, two ways:
        # - by piece (`_by_block` None, the normal case): `heads` maps the hash of each hashed
        #   piece's first block to the piece. Hashes are chained, so a hash fixes its position
        #   and every block before it; with every hash held by one block only, a cached chain
        #   position right after a piece's end can only be another piece's first block, and
        #   a lookup walks pieces (`_walk`), with no entry per block at all;
        # - by block (`_by_block`: block hash -> the piece whose block is found by it), from
        #   the moment a hash is held by two blocks (two requests prefilled it at once) until
        #   no such hash is left. vLLM keeps a hash cached while any block holds it, and so
        #   must we, or the prefix-closure below would break; `dups` lists the other pieces.
        #   Rare; every path that meets one goes block by block.
        self.heads: dict[int, Piece] = {}
        self._by_block: dict[int, Piece] | None = None
        self.dups: dict[int, list[Piece]] = {}
        # Set by `release_first`: blocks put at the head of the free queue may be a prefix that
        # other cached pieces continue (a shared system prompt), so they can be reused while
        # the continuation stays cached. The cache is then no longer prefix-closed, and a
        # request that recomputes the prefix may hash a block the continuation holds: from then
        # on `cache` checks every new hash, not only the first, before the by-piece path.
        self.holes = False
        # The free queue. vLLM's starts with every block in id order and appends freed blocks
        # at its tail, so never-used blocks are always its head: they are kept as a count.
        self.next_fresh = 0
        self._queue = Piece(None, 0, 0, 0)  # sentinel of the circular list of free pieces
        self._queue.prev = self._queue.next = self._queue
        # Blocks in the queued pieces (public: a fleet scrape reads used blocks inline as
        # next_fresh - queued, engine.kv_usages).
        self.queued = 0
        self.evictions = 0  # cached blocks reused for other content
        # KV tiers below HBM (sim/tiers.py): when a list, every eviction appends the blocks
        # that left the cache, as (first chain position, hashes in position order, whether
        # the piece may also be stored below), for the owner to move down.
        self.evict_log: list[tuple[int, list[int], bool]] | None = None

    @property
    def cached(self) -> dict[int, Piece]:
        """Block hash -> the piece whose block is found by it (built on demand: for tests)."""
        if self._by_block is not None:
            return self._by_block
        return {h: p for p in self.heads.values() if p.hashes for h in p.hashes}

    def _to_blocks(self) -> None:
        """Switch to the per-block map (a hash is about to be held twice)."""
        by_block: dict[int, Piece] = {}
        for p in self.heads.values():
            assert p.hashes is not None
            by_block.update(zip(p.hashes, repeat(p)))
        self._by_block = by_block
        self.heads = {}

    def _to_pieces(self) -> None:
        """Switch back to `heads` (no hash is held twice any more)."""
        assert self._by_block is not None and not self.dups
        heads: dict[int, Piece] = {}
        for p in set(self._by_block.values()):
            assert p.hashes
            heads[p.hashes[0]] = p
        self.heads = heads
        self._by_block = None

    def starts_no_piece(self, hashes: Sequence[int], pos: int) -> bool:
        """In the by-piece mode, no cached piece starts at chain position `pos` of `hashes`
        (none can past their end). False in the by-block mode, which cannot say it cheaply."""
        return self._by_block is None and (pos >= len(hashes) or hashes[pos] not in self.heads)

    @property
    def num_free(self) -> int:
        return self.queued + self.num_blocks - self.next_fresh

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
        self.queued += p.hi - p.lo

    def _dequeue(self, p: Piece) -> None:
        prv, nxt = p.prev, p.next
        assert prv is not None and nxt is not None
        prv.next, nxt.prev = nxt, prv
        p.prev = p.next = None
        self.queued -= p.hi - p.lo

    # ---- lookups --------------------------------------------------------------------

    def _walk(self, hashes: Sequence[int], n: int) -> tuple[int, list[Piece]]:
        """By piece: the cached prefix of hashes[:n] and the pieces holding it, in order.

        With no hash held twice, the cached block at the position where the prompt leaves a
        piece (its end, or a branch point), if any, starts a piece: a block starting inside
        one would repeat the hash of the block before it. Inside a piece, chained hashes agree
        up to some position and differ after it, so its last position settles a full match in
        one comparison and a partial one takes a binary search.
        """
        heads = self.heads
        pieces: list[Piece] = []
        j = 0
        while j < n:
            p = heads.get(hashes[j])
            if p is None:
                break
            ph = p.hashes
            assert ph is not None and p.lo == j
            pieces.append(p)
            e = min(p.hi, n)
            if ph[e - 1 - j] != hashes[e - 1]:
                # The piece leaves the prompt before e: a cached block there can only start
                # a piece (a branch), as above.
                e = agree_until(ph, j, hashes, j + 1, e - 1)
            j = e
        return j, pieces

    def count_hit(self, hashes: Sequence[int], max_blocks: int | None = None) -> int:
        """Length in blocks of the longest cached prefix of `hashes`.

        The cached set is prefix-closed: a block's ancestors are held by every request that
        holds it and are freed with it, after it (tail first), so no block outlives its parent
        in the cache. "Block j is cached" is therefore monotone in j: by piece, a walk over the
        pieces holding the prefix; by block, a binary search finds the same prefix as vLLM's
        block-by-block walk, in ~log2(n) probes.
        """
        n = len(hashes) if max_blocks is None else min(len(hashes), max_blocks)
        cached = self._by_block
        if cached is None:
            return self._walk(hashes, n)[0]
        if self.holes:  # not prefix-closed (`release_first`): vLLM's walk, to the first miss
            for j in range(n):
                if hashes[j] not in cached:
                    return j
            return n
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
        cached, dups = self._by_block, self.dups
        if cached is None:
            n_max = len(hashes) if max_blocks is None else min(len(hashes), max_blocks)
            n, pieces = self._walk(hashes, n_max)
            # A piece's group ends where the next one starts: the prompt may leave a piece
            # inside it and go on in a piece that starts there (a branch past a hole).
            ends = [q.lo for q in pieces[1:]] + [n] if pieces else []
            return Hit(hashes, n, [(p.lo, e) for p, e in zip(pieces, ends, strict=True)], pieces)
        n = self.count_hit(hashes, max_blocks)
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
        if hit.pieces is not None:
            pieces = zip(hit.groups, hit.pieces, strict=True)
            return sum(b - a for (a, b), p in pieces if p.ref == 0)
        cached, hashes = self._by_block, hit.hashes
        assert cached is not None
        return sum(b - a for a, b in hit.groups if cached[hashes[a]].ref == 0)

    # ---- a request's blocks ---------------------------------------------------------

    def take(self, table: BlockTable, hit: Hit) -> None:
        """Start an empty `table` with the blocks of `hit` (touching them: in use again)."""
        assert not len(table), "a prefix hit starts a request's blocks"
        cached, hashes = self._by_block, hit.hashes
        # Between a lookup and its take the pool only frees blocks: no piece moved, no mode
        # changed.
        assert (hit.pieces is None) == (cached is not None)
        for k, (a, b) in enumerate(hit.groups):
            # By block, looked up again: an earlier group's split may have moved it.
            p = hit.pieces[k] if hit.pieces is not None else cached[hashes[a]]  # type: ignore[index]
            if a != p.lo or b != p.hi:
                p = self._carve(p, a, b)
            if p.ref == 0:
                self._dequeue(p)
            p.ref += 1
            table.pieces.append(p)
        table.n_hashed = hit.n

    def refresh(self, hit: Hit) -> int:
        """The free blocks of `hit` move to the free queue's tail, as if just released (tail
        first, so the prompt's head is reused last): a request waiting to be admitted keeps
        its prefix ahead of older free blocks. Blocks in use stay as they are. Returns how
        many blocks moved. `sim.refresh_on_arrival`: vLLM leaves a waiting request's hit
        where it is until the request is scheduled (docs/kv_tiers/study_followups.md)."""
        cached, hashes = self._by_block, hit.hashes
        assert (hit.pieces is None) == (cached is not None)
        free: list[Piece] = []
        for k, (a, b) in enumerate(hit.groups):
            p = hit.pieces[k] if hit.pieces is not None else cached[hashes[a]]  # type: ignore[index]
            if p.ref:
                continue
            if a != p.lo or b != p.hi:
                p = self._carve(p, a, b)
            free.append(p)
        for p in reversed(free):
            self._dequeue(p)
            self._enqueue(p)
        return sum(p.hi - p.lo for p in free)

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
                self.queued -= k
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
        cached = self._by_block
        if cached is None:
            # Prefix-closed: if the first new position is not cached, none after it is; and
            # it could only be cached as a piece's first block (see `_walk`). With holes, a
            # later position may be: it starts a piece, so its hash is a head.
            heads = self.heads
            if hashes[0] not in heads and (not self.holes or heads.keys().isdisjoint(hashes)):
                if p.lo == start:
                    self.heads[hashes[0]] = p
                table.n_unhashed -= full - start
                table.n_hashed = full
                return
            # A hash about to be held twice: per block from here. The switch maps what is
            # cached now, so a grown piece's new positions are left out of it for a moment.
            if p.lo != start:
                del p.hashes[start - p.lo :]
            self._to_blocks()
            cached = self._by_block
            assert cached is not None
            if p.lo != start:
                p.hashes.extend(hashes)
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

    def release_first(self, table: BlockTable) -> None:
        """`release`, but the blocks no one holds go to the head of the free queue, in the
        order `release` queues them: they are the next reused (pause-aware demotion, finished
        sessions first). Sets `holes`: see `__init__`."""
        head = self._queue.next
        assert head is not None
        self.holes = self.holes or bool(table.pieces)
        if table.n_unhashed:
            self._enqueue(Piece(None, 0, table.n_unhashed, 0), before=head)
        for p in reversed(table.pieces):
            for leaf in reversed(p.leaves()):
                leaf.ref -= 1
                if leaf.ref == 0:
                    self._enqueue(leaf, before=head)
        table.pieces = []
        table.n_hashed = table.n_unhashed = 0

    def reset(self) -> None:
        """Drop every cached hash (vLLM's reset_prefix_cache); blocks in use are kept."""
        if self._by_block is None:
            for p in self.heads.values():
                p.hashes = None
            self.heads = {}
            return
        for p in {*self._by_block.values(), *(p for ps in self.dups.values() for p in ps)}:
            p.hashes = None
        self._by_block = None
        self.heads = {}
        self.dups.clear()

    # ---- internals ------------------------------------------------------------------

    def _uncache(self, p: Piece, lo: int, hi: int) -> None:
        """Positions [lo, hi) of piece p are reused: their hashes leave the cache."""
        assert p.hashes is not None
        cached, dups = self._by_block, self.dups
        if cached is None:
            if lo == p.lo:
                del self.heads[p.hashes[0]]
                if self.evict_log is not None:
                    # The whole piece: its list goes down as it is (a copy and the emptying
                    # would each touch every hash int's reference count).
                    self.evict_log.append((lo, p.hashes, p.below))
                    p.hashes = []
                else:
                    p.hashes.clear()
            else:
                if self.evict_log is not None:
                    self.evict_log.append((lo, p.hashes[lo - p.lo :], p.below))
                del p.hashes[lo - p.lo :]  # the caller cuts the piece to [p.lo, lo)
            self.evictions += hi - lo
            return
        hashes = p.hashes[lo - p.lo : hi - p.lo]
        del p.hashes[lo - p.lo :]
        log = self.evict_log
        if not dups or dups.keys().isdisjoint(hashes):
            deque(map(cached.__delitem__, hashes), maxlen=0)
            self.evictions += hi - lo
            if log is not None:
                log.append((lo, hashes, p.below))
            return
        pos = hi
        for h in reversed(hashes):  # queue order: tail first
            pos -= 1
            others = dups.get(h)
            if others is None:
                del cached[h]
                self.evictions += 1
                if log is not None:
                    log.append((pos, [h], True))
                continue
            if cached[h] is p:  # another block still holds h: it stays cached
                cached[h] = others.pop()
            else:
                others.remove(p)
            if not others:
                del dups[h]
        if not dups:
            self._to_pieces()

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
        if p.below:
            for part in parts:
                part.below = True
        if p.ref == 0:
            after = p.next
            self._dequeue(p)
            for part in reversed(parts):
                self._enqueue(part, before=after)
        else:
            p.children = parts
        cached, dups = self._by_block, self.dups
        if cached is None:
            heads = self.heads
            del heads[p.hashes[0]]
            for part in parts:
                assert part.hashes is not None
                heads[part.hashes[0]] = part
            p.hashes = None  # the parts hold them now
            return next(part for part in parts if part.lo == a)
        p.hashes = None
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
