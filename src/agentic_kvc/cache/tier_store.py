"""One KV tier's blocks, kept as runs of a prompt's chained hashes (issue 29; docs/kv_tiers.md).

`TierStore` is the store both sides of the workbench use for a tier below HBM: the simulated
engine's host memory and disk (sim/tiers.py, which adds the links a reload takes and the fleet's
wiring), and the router's estimate of them (cache/tier_index.py, its links idle). It lives here,
beside the other caches the router keeps, so that the router's code never imports the
simulator.

Blocks are kept as runs of chained hashes, indexed only every `MARK` positions: a long-context
run moves millions of blocks through the tiers, so the per-block work is list slicing, not a
dict entry per block. Eviction is LRU by run, in the order of the vLLM connector modelled
(`TierStore`: a run eaten from its tail, or, after a load with the simple connector, from its
head), or "retention": the runs of a session in a tool pause are evicted after every other run.

KV events. A store given a sink (`TierStore.publish`) reports what enters and leaves it as
vLLM's KV events do: a `BlockStored` for each run written, a `BlockRemoved` for each run (or
tail) evicted, with the tier's `medium` ("CPU" for host memory, as vLLM's OffloadingConnector
names it; "DISK" for a disk store), in the dict form `cache.prefix_index.ExactPrefixIndex.apply`
reads. Without a sink nothing is built.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count, repeat
from typing import Any

from agentic_kvc.cache.chain_index import agree_until


class Link:
    """One direction of a link: transfers run one after another (FIFO), each taking
    `latency_s + bytes / bytes_per_s`."""

    __slots__ = ("busy_s", "bytes", "bytes_per_s", "free_at", "latency_s", "transfers")

    def __init__(self, gbps: float, latency_s: float) -> None:
        self.bytes_per_s = gbps * 1e9
        self.latency_s = latency_s
        self.free_at = 0.0
        self.transfers = 0
        self.bytes = 0
        self.busy_s = 0.0

    def send(self, now: float, nbytes: int, after: float = 0.0) -> float:
        """Queue a transfer of `nbytes` at `now` that cannot start before `after`; its end."""
        start = max(now, self.free_at, after)
        dt = self.latency_s + nbytes / self.bytes_per_s
        self.free_at = start + dt
        self.transfers += 1
        self.bytes += nbytes
        self.busy_s += dt
        return self.free_at


# Runs an iterator to its end, keeping nothing (a deque's `extend` at maxlen 0: a C loop, and no
# keyword to parse per call as `deque(it, maxlen=0)` has).
_consume = deque(maxlen=0).extend


def lazy_walk_blocks(max_num_batched_tokens: int, block_size: int) -> int:
    """Blocks vLLM 0.32's SimpleCPUOffloadConnector walks per step in lazy mode, for one
    full-attention group (`_estimate_lazy_target_blocks`: cdiv(max_num_batched_tokens,
    block_size) x (1 + WATERMARK_RATIO 1.0)). A walk as long as the HBM pool reaches every
    freed block at the step after its release (docs/kv_tiers.md, "When the lazy mode stores")."""
    return 2 * -(-max_num_batched_tokens // block_size)


def walk_stores_at_free(max_num_batched_tokens: int, block_size: int, hbm_blocks: int) -> bool:
    """Whether vLLM's lazy walk covers an HBM pool of `hbm_blocks`, so that every block is
    stored at the step after it is freed (not only when the walk reaches it near eviction)."""
    return lazy_walk_blocks(max_num_batched_tokens, block_size) >= hbm_blocks


MARK = 16  # every run's blocks at chain positions divisible by this are indexed (and its head)


class Run:
    """Blocks stored together: chain positions [lo, lo + len(hashes)) of one prompt, whose
    write lands at `ready`. Recency is kept per run; eviction eats a run from its tail (a
    prompt's head goes last), or from its head once `head_first` (a run a load used, in a
    store with `simple_lru`)."""

    __slots__ = ("hashes", "head_first", "lo", "ready")

    def __init__(self, lo: int, hashes: list[int], ready: float = 0.0) -> None:
        self.lo = lo
        self.hashes = hashes
        self.ready = ready
        self.head_first = False


class TierStore:
    """One tier's blocks: `capacity` blocks, written over `write` and read over `read`.

    Blocks are kept as runs (`Run`), and no block is held twice. The dict `index` maps the
    hash of each run's first block, and of its blocks at chain positions divisible by `MARK`,
    to the run: a block hash fixes its chain position (hashes are chained), so the run holding
    position j, if any, has an indexed block among positions j, j-1, ..., down to the multiple
    of MARK at or below j, and a lookup probes at most MARK + 1 of them per run it crosses. The
    per-block work of storing, finding and evicting is then list slicing, not dict entries: a
    long-context run moves millions of blocks through the tiers.

    A block is findable from the moment its write is queued (vLLM's lazy offload copies a block
    before the GPU reuses it); a load that includes it waits for the write to land (`ready`).
    Eviction: `lru` orders runs, oldest first; with retention, a run whose session is in a pause
    (its first block's `held_until` in the future) is moved aside to `held` instead; `held` is
    evicted, oldest first, once its oldest run's pause is over or `lru` is empty.

    Recency follows one of vLLM 0.32's two CPU connectors (docs/kv_tiers.md cites the code):
    - `OffloadingConnector` (`simple_lru` False; the simulator's write-through tiers): its LRU
      (`kv_offload/cpu/policies/lru.py`) touches a request's blocks tail first, at a load and
      when the request finishes, stored ones included: a put or a load makes its runs the most
      recent, the prompt's head last, and a run is eaten from its tail.
    - `SimpleCPUOffloadConnector` (`simple_lru` True; store-on-eviction tiers, and the real
      engines' connector): its host pool is a block pool with a free queue. A store skips
      blocks the pool holds already (`_prepare_lazy_store_specs`), so a put leaves their
      place unchanged; the new blocks join in the order HBM evicted them (tail first). A load
      frees its host blocks in position order when done (`update_state_after_alloc`,
      `_cleanup_load_request`), so the loaded head is the least recent of them and is
      evicted first: a loaded run is then eaten from its head (`Run.head_first`).
    """

    __slots__ = (
        "below",
        "block_bytes",
        "capacity",
        "copies",
        "events",
        "evicted",
        "held",
        "held_until",
        "index",
        "lru",
        "medium",
        "n",
        "name",
        "offb",
        "read",
        "retention",
        "simple_lru",
        "write",
    )

    def __init__(
        self,
        name: str,
        capacity: int,
        block_bytes: int,
        write: Link,
        read: Link,
        retention: bool = False,
        below: TierStore | None = None,
        simple_lru: bool = False,
    ) -> None:
        self.name = name
        self.capacity = capacity
        self.block_bytes = block_bytes
        self.write = write
        self.read = read
        self.retention = retention
        self.below = below
        self.simple_lru = simple_lru
        self.index: dict[int, Run] = {}
        # The index's keys at chain positions not divisible by MARK (run heads there), by
        # position // MARK: {hash: position}. With chained hashes an indexed block can only
        # be hashes[j] of a prompt at its own position, so whether a prompt holds an indexed
        # block takes the prompt's MARK positions (one in MARK) and the heads in the buckets
        # its span covers (`_no_head`), not every block: a block hash read is a cache miss.
        self.offb: dict[int, dict[int, int]] = {}
        self.lru: OrderedDict[Run, None] = OrderedDict()
        self.held: OrderedDict[Run, None] = OrderedDict()
        self.held_until: dict[int, float] = {}
        self.n = 0  # blocks stored
        self.evicted = 0
        # KV events (module docstring): the sink each event is handed to, None for none, and
        # the medium they name; `copies`, with a sink, counts the runs holding each block.
        self.events: Callable[[dict[str, Any]], None] | None = None
        self.medium = "CPU"
        self.copies: dict[int, int] = {}

    def publish(self, sink: Callable[[dict[str, Any]], None]) -> None:
        """Report what enters and leaves this store to `sink` from now on, as KV events (the
        module docstring); the store must be empty."""
        if self.n:
            raise ValueError(f"{self.name}: KV events must be wired before the first block")
        self.events = sink
        self.copies = {}

    def _stored(self, runs: list[Run]) -> None:
        """A BlockStored event for the blocks of `runs` not held already. A block can be
        held by two runs (`_find`'s rare miss), which vLLM's stores never do; the events
        name each block once, as theirs."""
        copies = self.copies
        new: list[int] = []
        for r in runs:
            for h in r.hashes:
                c = copies.get(h, 0)
                copies[h] = c + 1
                if not c:
                    new.append(h)
        if new and self.events is not None:
            self.events(
                {
                    "type": "BlockStored",
                    "block_hashes": new,
                    "parent_block_hash": None,
                    "token_ids": [],
                    "medium": self.medium,
                }
            )

    def _removed(self, hashes: Sequence[int]) -> None:
        """A BlockRemoved event for the blocks of `hashes` that no other run holds."""
        copies = self.copies
        gone: list[int] = []
        for h in hashes:
            c = copies[h] - 1
            if c:
                copies[h] = c
            else:
                del copies[h]
                gone.append(h)
        if gone and self.events is not None:
            self.events({"type": "BlockRemoved", "block_hashes": gone, "medium": self.medium})

    def __len__(self) -> int:
        return self.n

    @property
    def offmark(self) -> dict[int, int]:
        """The index's keys at chain positions not divisible by MARK -> their position."""
        return {h: p for d in self.offb.values() for h, p in d.items()}

    def _unhead(self, h: int, lo: int) -> None:
        """Run head `h` at off-MARK chain position `lo` left the index."""
        d = self.offb.get(lo // MARK)
        if d is not None:
            d.pop(h, None)
            if not d:
                del self.offb[lo // MARK]

    def _no_head(self, hashes: Sequence[int], lo: int, hi: int) -> bool:
        """Whether no off-MARK head is among hashes[0 : hi - lo] (chain positions lo .. hi-1):
        the heads of the buckets the span covers, each compared with the prompt's block at
        its position."""
        offb = self.offb
        if not offb or hi <= lo:
            return True
        b0, b1 = lo // MARK, (hi - 1) // MARK
        if b1 - b0 < 2 * len(offb):
            found: Iterable[dict[int, int]] = filter(None, map(offb.get, range(b0, b1 + 1)))
        else:
            found = [d for b, d in offb.items() if b0 <= b <= b1]
        for d in found:
            for h, p in d.items():
                if lo <= p < hi and hashes[p - lo] == h:
                    return False
        return True

    @property
    def usage(self) -> float:
        return self.n / self.capacity

    def _find(self, hashes: Sequence[int], j: int, base: int) -> Run | None:
        """The run holding hashes[j] (chain position base + j), if any.

        When `hashes` starts after the multiple of MARK at or below j (a run handed down by
        an eviction), the probe also looks up to the next multiple; a stored run that starts
        before hashes[0] and ends before that is not seen, and its blocks may then be stored
        a second time (capacity, never a wrong hit: both hold the same blocks)."""
        index = self.index
        h = hashes[j]
        floor = j - (base + j) % MARK
        a = floor if floor > 0 else 0
        # The runs indexed at blocks a .. j, in one C pass (most probes find none, or only
        # the run the walk just left, which ends before j), checked nearest j first.
        for r in reversed(list(filter(None, map(index.get, hashes[a : j + 1])))):
            k = base + j - r.lo
            hs = r.hashes
            if 0 <= k < len(hs) and hs[k] == h:
                return r
        if floor < 0:
            for i in range(j + 1, min(floor + MARK + 1, len(hashes))):
                r = index.get(hashes[i])
                if r is not None:
                    k = base + j - r.lo
                    hs = r.hashes
                    if 0 <= k < len(hs) and hs[k] == h:
                        return r
        return None

    def walk(
        self, hashes: Sequence[int], start: int, stop: int, base: int = 0
    ) -> tuple[int, list[Run]]:
        """The end of the stored stretch of hashes[start:stop] from `start`, and its runs
        (`base`: the chain position of hashes[0]). `use(runs)` later, while the store is
        unchanged, is `use_held` without a second walk."""
        runs: list[Run] = []
        j = start
        stop = min(stop, len(hashes))
        index = self.index
        while j < stop:
            # The commonest answer first, without `_find`'s call: a run that starts at j (a
            # prompt's next run after the one just walked), its head indexed. `_find` probes
            # this key first too, so it would return the same run.
            h = hashes[j]
            r = index.get(h)
            if r is None or r.lo != base + j or r.hashes[0] != h:
                r = self._find(hashes, j, base)
                if r is None:
                    break
            hs = r.hashes
            off = r.lo - base  # where the run starts, as an index into hashes
            runs.append(r)
            e = min(off + len(hs), stop)
            if hs[e - 1 - off] != hashes[e - 1]:  # the prompt leaves the run before e
                e = agree_until(hs, off, hashes, j + 1, e - 1)
            j = e
        return j, runs

    def run(self, hashes: Sequence[int], start: int, stop: int) -> int:
        """How many of hashes[start:stop] this tier holds, contiguously from `start`."""
        return self.walk(hashes, start, stop)[0] - start

    def use(self, runs: list[Run]) -> None:
        """A load used these runs (a prompt's, in position order, e.g. from `walk` with the
        store unchanged since): they become the most recent, in the order of the connector
        modelled (class docstring): the head last (`OffloadingConnector`), or the head first
        and each run then eaten from its head (`simple_lru`)."""
        if self.simple_lru:
            for r in runs:
                r.head_first = True
            self._make_recent(runs)
        else:
            self._make_recent(reversed(runs))

    def _make_recent(self, runs: Iterable[Run]) -> None:
        """`runs` become the most recent, the last of them the most."""
        lru, held = self.lru, self.held
        for r in runs:
            if r in lru:
                lru.move_to_end(r)
            else:
                held.pop(r, None)
                lru[r] = None

    def use_held(self, hashes: Sequence[int], start: int, stop: int) -> int:
        """The stretch of hashes[start:stop] this tier holds from `start` is used: its runs
        become most recent. Returns where the stretch ends (one walk: `run` then `touch`
        would walk it twice)."""
        end, runs = self.walk(hashes, start, stop)
        self.use(runs)
        return end

    def touch(self, hashes: Sequence[int], start: int, stop: int) -> float:
        """A load uses hashes[start:stop] (stored): their runs are most recent. Returns when
        their writes have landed."""
        runs = self.walk(hashes, start, stop)[1]
        self.use(runs)
        return max((r.ready for r in runs), default=0.0)

    def _disjoint(self, hashes: Sequence[int], lo: int) -> bool:
        """Whether no block of `hashes` (chain positions lo, lo + 1, ...) is an index key:
        `index.keys().isdisjoint(hashes)`, checking the prompt's MARK positions and the
        off-MARK heads that fall in its span (`_no_head`)."""
        if not self.index.keys().isdisjoint(hashes[-lo % MARK :: MARK]):
            return False
        return self._no_head(hashes, lo, lo + len(hashes))

    def _first_key(self, hashes: Sequence[int], m: int) -> int:
        """The first j >= m with hashes[j] an index key (the caller knows there is one)."""
        return next(compress(count(m), map(self.index.__contains__, hashes[m:])))

    def _head(self, r: Run) -> None:
        """Index run `r`'s first block (kept by bucket too when off a MARK position)."""
        h, lo = r.hashes[0], r.lo
        self.index[h] = r
        if lo % MARK:
            d = self.offb.get(lo // MARK)
            if d is None:
                self.offb[lo // MARK] = {h: lo}
            else:
                d[h] = lo

    def _index(self, r: Run, marks: list[int] | None = None) -> None:
        """Index run `r`: its head, and its blocks at MARK positions (`marks`, when the
        caller has sliced them already)."""
        index, hs = self.index, r.hashes
        self._head(r)
        if marks is None:
            marks = hs[-r.lo % MARK :: MARK]  # from the first chain position divisible by MARK
        index.update(zip(marks, repeat(r)))

    def put(
        self,
        runs: Sequence[tuple[int, list[int]]],
        now: float,
        sampled: Sequence[bool] | None = None,
    ) -> int:
        """Store runs (chain position of the first block, hashes in position order), the
        first one least recent; blocks already stored are touched, the others written in one
        transfer (FIFO on `write`). Overflow is evicted (down, if a tier is below). Returns
        how many blocks were new.

        `sampled[i]`: run i is checked for stored blocks at its first block and its indexed
        positions only, not block by block (the caller knows it was not loaded from here; see
        `InstanceTiers.offload`)."""
        lru = self.lru
        keys = self.index.keys()
        fresh: list[Run] = []
        new = 0
        for i, (lo, hashes) in enumerate(runs):
            if not hashes:
                continue
            first = -lo % MARK  # index in hashes of the first chain position % MARK == 0
            marks = hashes[first::MARK]
            none = keys.isdisjoint(marks)
            if none and sampled is not None and sampled[i]:
                # `_find(hashes, 0, lo)` probes hashes up to the next MARK position: past the
                # MARK ones, only an off-MARK head can be found there (bucket lo // MARK's).
                if first and not self._no_head(hashes, lo, lo + min(first, len(hashes))):
                    none = self._find(hashes, 0, lo) is None
            elif none:  # the rest of `_disjoint`
                none = self._no_head(hashes, lo, lo + len(hashes))
            if none:
                # No indexed block among them: the walk below would find none (it probes no
                # block before hashes[0]), so none is stored (but the rare case in `_find`).
                r = Run(lo, hashes)
                self._index(r, marks)
                fresh.append(r)
                new += len(hashes)
                lru[r] = None  # a new run: most recent (`use`)
                continue
            # The stored stretch from the run's start; after it, any stored block belongs to a
            # run that starts after it (one covering its end would have extended it), whose
            # first block is indexed.
            m, parts = self.walk(hashes, 0, len(hashes), lo)
            first_fresh = len(fresh)
            while m < len(hashes):
                rest = hashes[m:] if m else hashes
                if self._disjoint(rest, lo + m):
                    r = Run(lo + m, rest)
                    self._index(r)
                    fresh.append(r)
                    new += len(rest)
                    parts.append(r)
                    break
                # The first stored block after m starts a run (its head is indexed): the
                # first indexed one among them.
                j = self._first_key(hashes, m)
                r = Run(lo + m, hashes[m:j])
                self._index(r)
                fresh.append(r)
                new += j - m
                parts.append(r)
                m, more = self.walk(hashes, j, len(hashes), lo)
                parts += more
            if self.simple_lru:
                # Blocks held already keep their place (vLLM's simple connector skips them);
                # the new ones are the most recent, the run nearest the prompt's head last.
                self._make_recent(reversed(fresh[first_fresh:]))
            else:
                self._make_recent(reversed(parts))
        if not new:
            return 0
        if self.events is not None:
            self._stored(fresh)
        end = self.write.send(now, new * self.block_bytes)
        for r in fresh:
            r.ready = end
        self.n += new
        over = self.n - self.capacity
        if over > 0:
            self._evict(over, now)
        return new

    def hold(self, hashes: Sequence[int], until: float) -> None:
        """Retention: these blocks belong to a session in a pause until `until`."""
        if self.retention:
            self.held_until.update(zip(hashes, repeat(until)))

    def _cut_head(self, r: Run, k: int) -> list[int]:
        """Evict the first k blocks of run `r` (fewer than it holds); returns them. Its next
        block becomes its head, indexed."""
        index, hs, lo = self.index, r.hashes, r.lo
        part = hs[:k]
        _consume(map(index.pop, part[-lo % MARK :: MARK], repeat(None)))
        index.pop(hs[0], None)  # the old head (popped above when at a MARK position)
        if lo % MARK:
            self._unhead(hs[0], lo)
        del hs[:k]
        r.lo = lo + k
        self._head(r)
        return part

    def _evict(self, n: int, now: float) -> None:
        lru, held, until, index = self.lru, self.held, self.held_until, self.index
        below = self.below
        out: list[tuple[int, list[int]]] = []
        removed: list[int] | None = [] if self.events is not None else None
        dropped = 0
        if not held and not until and removed is None:
            # The common case (LRU, no KV events), with what the loop below does for it:
            # runs leave from the LRU's front, the last one cut from its tail.
            pop = index.pop
            while n > 0 and lru:
                r = next(iter(lru))
                hs = r.hashes
                k = len(hs)
                lo = r.lo
                if n >= k:  # the whole run
                    _consume(map(pop, hs[-lo % MARK :: MARK], repeat(None)))
                    pop(hs[0], None)  # the head
                    if lo % MARK:
                        self._unhead(hs[0], lo)
                    lru.popitem(False)
                    if below is not None:  # handed down as it is: the run is gone
                        out.append((lo, hs))
                        r.hashes = []
                    else:
                        del hs[:]
                elif r.head_first:
                    k = n
                    part = self._cut_head(r, k)
                    if below is not None:
                        out.append((lo, part))
                else:
                    k = n
                    cut = len(hs) - k
                    lo += cut
                    _consume(map(pop, hs[cut + (-lo % MARK) :: MARK], repeat(None)))
                    if below is not None:
                        out.append((lo, hs[cut:]))
                    del hs[cut:]
                dropped += k
                n -= k
        while n > 0:
            # Held runs whose pause is over go first, then LRU, then the held ones.
            if held:
                r = next(iter(held))
                t = until.get(r.hashes[0])
                src = held if (t is None or t <= now or not lru) else lru
            elif lru:
                src = lru
            else:
                break
            r = next(iter(src))
            hs = r.hashes
            if src is lru and until:
                t = until.get(hs[0])
                if t is not None and t > now:  # a paused session's: after every unheld run
                    del lru[r]
                    held[r] = None
                    continue
            k = min(n, len(hs))
            cut = len(hs) - k
            if cut and r.head_first:
                lo = r.lo
                part = self._cut_head(r, k)
                if removed is not None:
                    removed += part
                if until:
                    _consume(map(until.pop, part, repeat(None)))
                if below is not None:
                    out.append((lo, part))
                dropped += k
                n -= k
                continue
            lo = r.lo + cut
            first = cut + (-lo % MARK)
            _consume(map(index.pop, hs[first::MARK], repeat(None)))
            if removed is not None:
                removed += hs[cut:]
            if cut == 0:
                index.pop(hs[0], None)  # the head
                if r.lo % MARK:
                    self._unhead(hs[0], r.lo)
                del src[r]
            if until:
                _consume(map(until.pop, hs[cut:], repeat(None)))
            if below is not None:  # (else no copy: each one touches every block)
                out.append((lo, hs[cut:]))
            del hs[cut:]
            dropped += k
            n -= k
        self.n -= dropped
        self.evicted += dropped
        if removed:
            self._removed(removed)
        if below is not None and out:
            below.put(out, now)
