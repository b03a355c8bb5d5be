"""The router's estimated prefix index kept as segments of chains, for the simulator.

Answers exactly what `prefix_index.EstimatedPrefixIndex` answers (per-instance LRU of block
hashes, tail first within a routed prompt, a capacity in blocks and an optional TTL) when block
hashes are *chained*: the hash of block j fixes blocks 0..j (and so its position), as vLLM's
and the proxy's hashes do and the simulator's `engine_block_hashes` do. Then:

- a later `record` that shares blocks 0..k-1 with an earlier one takes exactly that prefix
  from it, so what an earlier record still holds is one contiguous *segment* [a, end) of its
  prompt: its head was taken by later records, its tail by LRU eviction;
- no hash is held by two segments, so the held block at the position right after a segment
  ends, if any, starts another segment, and a prompt's held prefix is found by walking
  segments from `heads` (hash of a segment's first block -> its run), comparing one hash per
  segment (chained hashes agree up to a point and differ after it; a partial segment takes a
  binary search).

A `demote` (the engine released a prompt's blocks to the head of its free queue) moves the
prompt's held segments to a new run at the LRU's front; its eviction can leave a hole (a
continuation held after a block that is not), which a walk stops at, as vLLM's lookup does, and
which `record` looks past (`_past_holes`) so that no hash is held twice.

So `record`, eviction and matching cost O(segments touched) Python steps and no dict entry
per block (the per-hash `EstimatedPrefixIndex` updates one entry per recorded block and
deletes one per evicted block: issue 16's largest cost on long prompts). The recorded hash
lists are kept by reference (the simulator never mutates them). `tests/cache/
test_chain_index.py` holds it to `EstimatedPrefixIndex` on random chained workloads.

Matching the whole fleet at once: on a large fleet every instance holds the shared system
prompt, so a probe per instance costs O(instances) Python steps per request. The segments that
start at position 0 are therefore also kept fleet-wide, grouped by their first hash
(`_Group`): each group has a reference chain `ref` (the first such segment's hashes) and
buckets its segments by `c`, how far a segment agrees with `ref` (bounded by what it still
holds). A prompt agreeing with `ref` up to L then agrees with a bucket's segments up to
min(c, L), except for segments with c == L whose next block is the prompt's (`by_next`,
walked one by one); the walk continues past that point only on instances with a segment
starting at the prompt's next block (`_where`, hash -> instances, all segment heads). So
`matched_blocks` costs one binary search against `ref`, one step per bucket and a C-speed
store per holding instance, plus a walk per exception; `record` and eviction keep the maps
(a few dict steps per segment touched). Each group keeps its `ref` list by reference.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from agentic_kvc.cache.prefix_index import IndexClock
from agentic_kvc.policy.base import RequestView


class _Run:
    """One `record` call: chain positions [a, end) of `hashes` are still held by it."""

    __slots__ = ("a", "c", "end", "hashes", "nxt", "off", "t")

    def __init__(self, hashes: Sequence[int], t: float) -> None:
        self.hashes = hashes
        self.off = 0  # chain position of hashes[0] (compaction drops a dead head)
        self.a = 0
        self.end = len(hashes)
        self.t = t
        # While a == 0 (in its `_Group`): how far it agrees with the group's ref, and its
        # hash at that position if it holds it (None: it ends there).
        self.c = 0
        self.nxt: int | None = None


class _Group:
    """The fleet's segments that start at position 0 with one hash (at most one per
    instance), bucketed by how far they agree with a reference chain."""

    __slots__ = ("by_c", "by_next", "hint", "ref")

    def __init__(self, ref: Sequence[int]) -> None:
        self.ref = ref
        self.hint = 0  # where the last chain compared left ref: most leave it there (the
        # end of a shared system prompt), tried before a binary search
        self.by_c: dict[int, dict[int, _Run]] = {}  # c -> {instance: segment}
        self.by_next: dict[tuple[int, int], set[int]] = {}  # (c, hash at c) -> instances


def agree_until(hs: Sequence[int], off: int, hashes: Sequence[int], lo: int, hi: int) -> int:
    """The largest m in [lo, hi] with block m-1 of the prompt equal to the run's (chained
    hashes agree up to a point, then differ), by binary search."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if hs[mid - 1 - off] == hashes[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _leaves(g: _Group, hs: Sequence[int], e: int) -> int:
    """Where chain `hs` (from position 0, same first block as `g.ref`) leaves g.ref, within
    its first e blocks (e <= len(g.ref))."""
    ref, h = g.ref, g.hint
    if 0 < h < e and hs[h - 1] == ref[h - 1] and hs[h] != ref[h]:
        return h
    if hs[e - 1] == ref[e - 1]:
        return e
    g.hint = c = agree_until(hs, 0, ref, 1, e - 1)
    return c


class ChainedPrefixIndex(IndexClock):
    """`EstimatedPrefixIndex`'s answers, by segments; block hashes must be chained."""

    def __init__(
        self,
        n_instances: int,
        capacity_blocks: int | None = None,
        ttl_s: float | None = None,
    ) -> None:
        super().__init__(n_instances, capacity_blocks, ttl_s)
        # Per instance: hash of a live segment's first block -> its run; the runs, oldest
        # first (dead ones linger until they reach the front or a compaction); blocks held;
        # and hashes referenced by the runs (to bound memory).
        self._heads: list[dict[int, _Run]] = [{} for _ in range(n_instances)]
        self._runs: list[deque[_Run]] = [deque() for _ in range(n_instances)]
        self._size = [0] * n_instances
        self._refs = [0] * n_instances
        # Per instance: whether a `demote` may have left a hole (a continuation held after a
        # block that is not), so that `record` must look for segments past its walk.
        self._holed = [False] * n_instances
        # Fleet-wide (for `matched_blocks`): position-0 segments by first hash, and every
        # live segment head -> the instances holding a segment starting with it.
        self._groups: dict[int, _Group] = {}
        self._where: dict[int, set[int]] = {}
        # Called with (instance, chain position of the first, hashes) for every run of blocks
        # the capacity evicts, in chain order (the tier-aware index stores them in its host
        # tier: `tier_index.py`); None: nothing.
        self.on_evict: Callable[[int, int, Sequence[int]], None] | None = None

    @property
    def n_instances(self) -> int:
        return len(self._heads)

    def _ensure(self, instance: int) -> dict[int, _Run]:
        if instance < 0:
            raise IndexError(f"instance index must be >= 0, got {instance}")
        while instance >= len(self._heads):
            self._heads.append({})
            self._runs.append(deque())
            self._size.append(0)
            self._refs.append(0)
            self._holed.append(False)
        return self._heads[instance]

    def _set_head(self, instance: int, h: int, r: _Run) -> None:
        """heads[h] = r on `instance`, kept in the fleet-wide maps."""
        self._heads[instance][h] = r
        got = self._where.get(h)
        if got is None:
            self._where[h] = {instance}
        else:
            got.add(instance)
        if r.a == 0:
            self._join(instance, r)

    def _del_head(self, instance: int, h: int, r: _Run) -> None:
        """del heads[h] (r's segment) on `instance`, before r.a or r.end move."""
        del self._heads[instance][h]
        got = self._where[h]
        got.discard(instance)
        if not got:
            del self._where[h]
        if r.a == 0:
            self._leave(instance, r)

    def _join(self, instance: int, r: _Run) -> None:
        hs = r.hashes  # r.a == r.off == 0: hs[j] is chain position j
        g = self._groups.get(hs[0])
        if g is None:
            g = self._groups[hs[0]] = _Group(hs)
        self._bucket(g, instance, r, _leaves(g, hs, min(r.end, len(g.ref))))

    @staticmethod
    def _bucket(g: _Group, instance: int, r: _Run, c: int) -> None:
        r.c = c
        got = g.by_c.get(c)
        if got is None:
            g.by_c[c] = {instance: r}
        else:
            got[instance] = r
        if c < r.end:
            r.nxt = nxt = r.hashes[c]
            key = (c, nxt)
            ins = g.by_next.get(key)
            if ins is None:
                g.by_next[key] = {instance}
            else:
                ins.add(instance)
        else:
            r.nxt = None

    def _leave(self, instance: int, r: _Run) -> None:
        g = self._groups[r.hashes[0]]
        got = g.by_c[r.c]
        del got[instance]
        if not got:
            del g.by_c[r.c]
        if r.nxt is not None:
            key = (r.c, r.nxt)
            ins = g.by_next[key]
            ins.discard(instance)
            if not ins:
                del g.by_next[key]
        if not g.by_c:
            del self._groups[r.hashes[0]]

    def _shrunk(self, instance: int, r: _Run) -> None:
        """r (a == 0, still live) lost its tail down to r.end: rebucket if that cut it
        before (or at) where it left the reference."""
        if r.end < r.c or (r.end == r.c and r.nxt is not None):
            self._leave(instance, r)
            g = self._groups.get(r.hashes[0])
            if g is None:  # it was the only member: a new group with itself as ref
                g = self._groups[r.hashes[0]] = _Group(r.hashes)
            self._bucket(g, instance, r, r.end)

    @staticmethod
    def _held(
        heads: dict[int, _Run],
        hashes: Sequence[int],
        n: int,
        cutoff: float,
        guess: int = 0,
        j: int = 0,
    ) -> int:
        """Blocks of hashes[:n] held (runs touched before `cutoff` count as expired).

        A walk over segments: one starts at position j; the prompt agrees with it up to its
        end or up to a point m found by binary search (chained hashes agree, then differ);
        the held block at m, if any, can only start a segment (a block starting inside one
        would repeat the hash of the block before it), a branch taken by another record.
        `guess`: a likely m (the previous instance's answer: instances that hold part of a
        prompt mostly hold the same part, a shared system prompt), tried first. `j`: where to
        start (a position known to be held up to, at a segment's end).
        """
        while j < n:
            r = heads.get(hashes[j])
            if r is None or r.t < cutoff:
                break
            e = r.end if r.end < n else n
            hs, off = r.hashes, r.off
            if hs[e - 1 - off] != hashes[e - 1]:
                lo, hi = j + 1, e - 1  # the answer: block lo-1 agrees, block lo does not
                if lo < guess < hi:
                    if hs[guess - 1 - off] != hashes[guess - 1]:
                        hi = guess - 1
                    elif hs[guess - off] != hashes[guess]:
                        lo = hi = guess
                    else:
                        lo = guess + 1
                e = agree_until(hs, off, hashes, lo, hi)
            j = e
        return j

    @staticmethod
    def _segments(heads: dict[int, _Run], hashes: Sequence[int], n: int) -> list[tuple[_Run, int]]:
        """The runs `_held` walks through for hashes[:n], expired ones included, in order,
        each with the position where the prompt leaves it."""
        out: list[tuple[_Run, int]] = []
        j = 0
        while j < n:
            r = heads.get(hashes[j])
            if r is None:
                break
            e = min(r.end, n)
            hs, off = r.hashes, r.off
            if hs[e - 1 - off] != hashes[e - 1]:
                e = agree_until(hs, off, hashes, j + 1, e - 1)
            out.append((r, e))
            j = e
        return out

    @staticmethod
    def _past_holes(
        heads: dict[int, _Run], hashes: Sequence[int], j: int, n: int
    ) -> list[tuple[_Run, int, int]]:
        """Segments holding blocks of hashes[j:n] after a hole (`demote`), each with the
        positions [start, end) the prompt shares with it; `_segments` walked to j."""
        out: list[tuple[_Run, int, int]] = []
        if heads.keys().isdisjoint(hashes[j:n]):  # the common case, at C speed
            return out
        while j < n:
            k = next((p for p in range(j, n) if hashes[p] in heads), n)
            if k == n:
                break
            r = heads[hashes[k]]
            e = min(r.end, n)  # (r.a == k: a chained hash fixes its position)
            hs, off = r.hashes, r.off
            if hs[e - 1 - off] != hashes[e - 1]:
                e = agree_until(hs, off, hashes, k + 1, e - 1)
            out.append((r, k, e))
            j = e
        return out

    def _take(self, instance: int, r: _Run, e: int) -> None:
        """A record or demote takes segment r's head up to chain position e."""
        hs, off = r.hashes, r.off
        self._del_head(instance, hs[r.a - off], r)
        if e < r.end:
            r.a = e
            self._set_head(instance, hs[e - off], r)
        else:
            r.a = r.end

    def record(self, instance: int, block_hashes: Sequence[int], now: float) -> None:
        """The router sent a prompt with these full blocks to `instance` at time `now`."""
        self.advance(now)
        heads = self._ensure(instance)
        n = len(block_hashes)
        if n:
            # Held blocks (expired or not: a record refreshes them) move to the new run.
            m = held = 0
            for r, e in self._segments(heads, block_hashes, n):
                self._take(instance, r, e)  # its head [a, e) goes to the new run
                held = m = e
            if self._holed[instance]:
                for r, k, e in self._past_holes(heads, block_hashes, m, n):
                    self._take(instance, r, e)
                    held += e - k
            run = _Run(block_hashes, self._now)
            self._set_head(instance, block_hashes[0], run)
            self._runs[instance].append(run)
            self._size[instance] += n - held
            self._refs[instance] += n
        self._evict(instance)

    def demote(
        self, instance: int, block_hashes: Sequence[int], now: float, store_below: bool = False
    ) -> None:
        """The engine released this prompt's blocks to the head of its free queue (finished
        sessions first, pause-aware demotion: `sim.blocks.BlockPool.release_first`): the
        prompt's held prefix becomes the least recently used part of the instance's LRU,
        evicted tail first before anything else, its touch time that of the oldest block held
        (so LRU order and touch times still agree, and a TTL expires it no later than those).
        `store_below`: no tier below HBM here (`TieredPrefixIndex.demote` reads it).

        Other prompts that extend part of this prefix keep their place, so eviction can now
        leave a hole (a prefix gone, a continuation still held), as it does in the engine; a
        walk stops at the first missing block either way, as vLLM's lookup does."""
        self.advance(now)
        heads = self._ensure(instance)
        self._evict(instance)  # expired runs off the front: what is left is in time order
        cutoff, segments = self._cutoff(), []
        for r, e in self._segments(heads, block_hashes, len(block_hashes)):
            if r.t < cutoff:
                break
            segments.append((r, e))
        if not segments:
            return
        runs = self._runs[instance]
        t = runs[0].t  # live and not expired: the oldest touch held (runs are in time order)
        for r, e in segments:
            self._take(instance, r, e)
        run = _Run(block_hashes, t)
        run.end = segments[-1][1]
        self._set_head(instance, block_hashes[0], run)
        runs.appendleft(run)
        self._refs[instance] += len(block_hashes)
        self._holed[instance] = True
        self._evict(instance)

    def _evict(self, instance: int) -> None:
        runs = self._runs[instance]
        cap = self.capacity_blocks
        if cap is not None:
            excess = self._size[instance] - cap
            while excess > 0:  # runs[0] is the oldest: drop least recently used first
                r = runs[0]
                k = min(excess, r.end - r.a)
                if k > 0:
                    if self.on_evict is not None:
                        lo = r.end - k
                        self.on_evict(instance, lo, r.hashes[lo - r.off : r.end - r.off])
                    if k == r.end - r.a:
                        self._del_head(instance, r.hashes[r.a - r.off], r)
                        r.end -= k
                    else:
                        r.end -= k
                        if r.a == 0:
                            self._shrunk(instance, r)
                    excess -= k
                    self._size[instance] -= k
                if r.end <= r.a:
                    self._pop(instance)
        cutoff = self._cutoff()
        while runs and runs[0].t < cutoff:
            r = runs[0]
            if r.end > r.a:
                self._del_head(instance, r.hashes[r.a - r.off], r)
                self._size[instance] -= r.end - r.a
                r.end = r.a
            self._pop(instance)
        while runs and runs[0].end <= runs[0].a:
            self._pop(instance)
        if self._refs[instance] > 4 * self._size[instance] + 4096:
            self._compact(instance)

    def _pop(self, instance: int) -> None:
        r = self._runs[instance].popleft()
        self._refs[instance] -= len(r.hashes)

    def _compact(self, instance: int) -> None:
        """Drop dead runs and the dead heads and tails of live ones (memory stays
        proportional to what the index holds)."""
        live: deque[_Run] = deque()
        for r in self._runs[instance]:
            if r.end > r.a:
                if r.a > r.off or r.end - r.off < len(r.hashes):
                    r.hashes = list(r.hashes[r.a - r.off : r.end - r.off])
                    r.off = r.a
                live.append(r)
        self._runs[instance] = live
        self._refs[instance] = sum(len(r.hashes) for r in live)

    def lru(self, instance: int) -> list[tuple[int, float]]:
        """(hash, last touch time) of every block held, least recently used first."""
        self._ensure(instance)
        return [
            (r.hashes[j - r.off], r.t)
            for r in self._runs[instance]
            for j in range(r.end - 1, r.a - 1, -1)
        ]

    def clear(self, instance: int) -> None:
        """Forget everything about an instance (restarted, or its cache was reset)."""
        heads = self._ensure(instance)
        for h, r in list(heads.items()):
            self._del_head(instance, h, r)
        self._runs[instance].clear()
        self._size[instance] = self._refs[instance] = 0
        self._holed[instance] = False

    def blocks(self, instance: int) -> int:
        """Blocks currently believed cached on `instance` (TTL-expired ones excluded)."""
        self._ensure(instance)
        self._evict(instance)
        return self._size[instance]

    def matched_blocks(self, block_hashes: Sequence[int], n_instances: int) -> list[int]:
        """Blocks of the prompt held per instance, for the whole fleet in one pass over the
        group of segments starting with the prompt's first block (module docstring)."""
        nb = len(block_hashes)
        if nb == 0 or n_instances < len(self._heads):
            return self._matched_each(block_hashes, n_instances)
        out = [0] * n_instances
        g = self._groups.get(block_hashes[0])
        if g is None:
            return out
        q = block_hashes
        big = _leaves(g, q, min(nb, len(g.ref)))
        ends: set[int] = set()  # the answers given so far: a walk may go on from there
        for c, members in g.by_c.items():
            m = c if c < big else big
            if len(members) == n_instances:  # the only bucket: every instance is in it
                out = [m] * n_instances
            else:
                for i in members:
                    out[i] = m
            if m < nb:
                ends.add(m)
        cutoff = self._cutoff()
        if cutoff > float("-inf"):  # an expired first segment holds nothing
            for members in g.by_c.values():
                for i, r in members.items():
                    if r.t < cutoff:
                        out[i] = 0
        heads, held = self._heads, self._held
        # Segments that go on along the prompt past where they leave `ref`: walk each.
        walk = g.by_next.get((big, q[big])) if big < nb else None
        for m in ends:
            more = self._where.get(q[m])
            if more:  # instances with a segment starting right where their answer ends
                for i in more:
                    if out[i] == m and (walk is None or i not in walk):
                        out[i] = held(heads[i], q, nb, cutoff, 0, m)
        if walk:
            for i in walk:
                out[i] = held(heads[i], q, nb, cutoff)
        return out

    def _matched_each(self, block_hashes: Sequence[int], n_instances: int) -> list[int]:
        """`matched_blocks` by a probe per instance (any `n_instances`; the tests' check)."""
        nb = len(block_hashes)
        out = [0] * n_instances
        if nb == 0:
            return out
        cutoff = self._cutoff()
        first = block_hashes[0]
        held = self._held
        guess, g1, g0 = 0, None, None  # a likely answer m, block_hashes[m - 1], [m]
        for i, heads in enumerate(self._heads[:n_instances]):
            r = heads.get(first)
            if r is None:  # the common case: this instance never saw the prompt's head
                continue
            # Inlined `_held` for its commonest answer: the segment at the head (it starts at
            # 0, so its hashes start there too) agrees up to `guess` and no branch starts there.
            if guess and guess < r.end and r.t >= cutoff:
                hs = r.hashes
                if hs[guess - 1] == g1 and hs[guess] != g0 and g0 not in heads:
                    out[i] = guess
                    continue
            out[i] = m = held(heads, block_hashes, nb, cutoff, guess)
            if 0 < m < nb:
                guess, g1, g0 = m, block_hashes[m - 1], block_hashes[m]
        return out

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        bs = request.block_size
        return [m * bs for m in self.matched_blocks(request.block_hashes, n_instances)]

    def held_blocks(self, instance: int, block_hashes: Sequence[int]) -> int:
        """Leading blocks of `block_hashes` that `instance` holds (one instance's probe)."""
        if not block_hashes or instance >= len(self._heads):
            return 0
        return self._held(self._heads[instance], block_hashes, len(block_hashes), self._cutoff())

    def matched_tokens_at(self, request: RequestView, instance: int) -> int:
        """`matched_tokens(request, instance + 1)[instance]`, probing that instance only."""
        hashes = request.block_hashes
        if not hashes or instance >= len(self._heads):
            return 0
        return self._held(self._heads[instance], hashes, len(hashes), self._cutoff()) * (
            request.block_size
        )
