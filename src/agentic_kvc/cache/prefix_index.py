"""Prefix-cache indexes: which leading blocks of a request each instance holds.

`EstimatedPrefixIndex` is the router's own guess (SGLang's and llm-d's "approximate" mode,
Dynamo's insert-on-route fallback): every routed prompt is recorded for the instance that
prefilled it, each instance keeps an LRU of block hashes with a capacity (its KV cache size in
blocks) and a TTL, and nothing is learned from the engines.

`BlockIndex` is a plain hash -> instances map with explicit add / remove / clear per instance.
`ExactPrefixIndex` keeps one up to date from the engines' own vLLM KV events (BlockStored,
BlockRemoved, AllBlocksCleared): what each instance really holds, evictions included;
`cache/kv_events.py` decodes the events and feeds it.

Both answer `matched_tokens(request, n_instances)`: for each instance, the number of leading
prompt tokens (whole blocks of `request.block_size`) it holds, which is what vLLM's prefix
cache would reuse.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, islice, repeat
from operator import is_
from typing import Any

from agentic_kvc.cache.hashing import extend_block_hashes
from agentic_kvc.policy.base import RequestView, TierHits


class _Record:
    """One `record` call's blocks: an LRU run that all got the same touch time.

    Entries leave from the end (the prompt's tail first); `end` is how many are left. An entry
    whose hash a later record touched again is stale here (the index's `_owner` names that
    later record) and is skipped.
    """

    __slots__ = ("end", "hashes", "t")

    def __init__(self, hashes: list[int], t: float) -> None:
        self.hashes = hashes
        self.end = len(hashes)
        self.t = t


def _held_prefix(
    get: Callable[[int], _Record | None], cutoff: float, hashes: Sequence[int], lo: int, hi: int
) -> int:
    """How many of `hashes` an instance holds as a prefix, known to lie in [lo, hi]: block
    m-1 held and block m absent, by binary search. `get` is the instance's hash -> record map
    lookup; a record older than `cutoff` (TTL) counts as absent. Exact because "block j is
    held" is monotone in j (`EstimatedPrefixIndex` says why); matched_blocks and
    matched_tokens_at both search with it."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        run = get(hashes[mid - 1])
        if run is not None and run.t >= cutoff:
            lo = mid
        else:
            hi = mid - 1
    return lo


class IndexClock:
    """What the estimated indexes share: their LRU capacity, TTL and clock (arguments checked)."""

    def __init__(self, n_instances: int, capacity_blocks: int | None, ttl_s: float | None) -> None:
        if n_instances < 0:
            raise ValueError(f"n_instances must be >= 0, got {n_instances}")
        if capacity_blocks is not None and capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1 or None, got {capacity_blocks}")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0 or None, got {ttl_s}")
        self.capacity_blocks = capacity_blocks
        self.ttl_s = ttl_s
        self._now = float("-inf")

    def advance(self, now: float) -> None:
        """Move the index clock (for TTL) without recording anything; time never goes back."""
        if now > self._now:
            self._now = now

    def _cutoff(self) -> float:
        return float("-inf") if self.ttl_s is None else self._now - self.ttl_s


class EstimatedPrefixIndex(IndexClock):
    """Per-instance LRU of router block hashes with a capacity and a TTL.

    Why it can answer in ~13 probes per instance: block hashes are chained (a block's key
    fixes its whole prefix), and `record` touches a prompt's blocks tail first, so within one
    call every block is touched after all its descendants. A block is therefore never older
    (in LRU order or by touch time) than any block that extends it, and both LRU eviction and
    TTL expiry drop descendants no later than their ancestors: each instance's set stays
    prefix-closed. For a request, "block j is held" is then monotone in j (held up to some m,
    absent after), and a binary search finds m. (`demote`, a release to the LRU's front that
    vLLM's own order never makes, breaks this; after one, matches walk instead.)

    This mirrors vLLM, which frees a finished request's blocks tail first, so its free queue
    also evicts prompt tails before heads. What the estimate cannot know: blocks still pinned by
    running requests (vLLM evicts only free blocks), the engine's real capacity after
    fragmentation, preemptions, and prompts the router did not route (e.g. after a restart).
    Hash collisions aside, answers are exact for the LRU model itself.

    Representation (for speed; the LRU order is the same as a per-block one): consecutive turns
    of a session re-record thousands of blocks they share, so instead of moving each block to
    the LRU's end, each instance keeps its `record` calls in order (`_Record` runs) and a map
    hash -> the latest run that touched it, updated at C speed. A block's place in the LRU is
    its latest run, then its position in that run from the tail; earlier runs' copies are
    stale and skipped when eviction reaches them.
    """

    def __init__(
        self,
        n_instances: int,
        capacity_blocks: int | None = None,
        ttl_s: float | None = None,
    ) -> None:
        super().__init__(n_instances, capacity_blocks, ttl_s)
        # Per instance: hash -> the latest run holding it; the runs, oldest first; and how
        # many entries (live or stale) the runs hold, to bound memory (see `_compact`).
        self._owner: list[dict[int, _Record]] = [{} for _ in range(n_instances)]
        self._runs: list[deque[_Record]] = [deque() for _ in range(n_instances)]
        self._entries = [0] * n_instances
        # Set by `demote`: the held sets may no longer be prefix-closed, so a match walks
        # from the first block to the first miss instead of searching.
        self._holes = False

    @property
    def n_instances(self) -> int:
        return len(self._owner)

    def _ensure(self, instance: int) -> dict[int, _Record]:
        if instance < 0:
            raise IndexError(f"instance index must be >= 0, got {instance}")
        while instance >= len(self._owner):
            self._owner.append({})
            self._runs.append(deque())
            self._entries.append(0)
        return self._owner[instance]

    def record(self, instance: int, block_hashes: Sequence[int], now: float) -> None:
        """The router sent a prompt with these full blocks to `instance` at time `now`."""
        self.advance(now)
        owner = self._ensure(instance)
        hashes = list(block_hashes)
        run = _Record(hashes, self._now)
        latest = dict.fromkeys(hashes, run)
        if len(latest) < len(hashes):
            # A hash repeated within one prompt: touched tail first, its last touch is its
            # first occurrence, which is where it stays.
            run.hashes = hashes = list(latest)
            run.end = len(hashes)
        if hashes:
            owner.update(latest)
            self._runs[instance].append(run)
            self._entries[instance] += len(hashes)
        self._evict(instance)

    def demote(
        self, instance: int, block_hashes: Sequence[int], now: float, store_below: bool = False
    ) -> None:
        """The engine released this prompt's blocks to the head of its free queue: its held
        prefix becomes the least recently used part of the LRU, tail first, touched when the
        oldest block held was (`ChainedPrefixIndex.demote` says why; `store_below` is for a
        tiered view). Sets `_holes`."""
        self.advance(now)
        owner = self._ensure(instance)
        self._evict(instance)
        get, cutoff = owner.get, self._cutoff()
        m = self._held(get, cutoff, block_hashes, 0, len(block_hashes))
        if not m:
            return
        held = list(dict.fromkeys(block_hashes[:m]))
        # The oldest touch time still held (runs are in time order): the first run with a
        # live entry (runs before it hold only entries touched again later).
        runs = self._runs[instance]
        oldest = next(r.t for r in runs if any(get(h) is r for h in r.hashes[: r.end]))
        run = _Record(held, oldest)
        owner.update(dict.fromkeys(held, run))
        runs.appendleft(run)
        self._entries[instance] += len(held)
        self._holes = True
        self._evict(instance)

    def _held(
        self,
        get: Callable[[int], _Record | None],
        cutoff: float,
        hashes: Sequence[int],
        lo: int,
        hi: int,
    ) -> int:
        """Leading blocks of `hashes` held, known to lie in [lo, hi]: a binary search while
        the held sets are prefix-closed, else a walk to the first miss (`demote`)."""
        if not self._holes:
            return _held_prefix(get, cutoff, hashes, lo, hi)
        m = 0
        for h in hashes:
            run = get(h)
            if run is None or run.t < cutoff:
                break
            m += 1
        return m

    def _drop(self, instance: int, run: _Record, n: int | None = None) -> int:
        """Evict up to `n` (None: all) live entries of `run`, tail first; returns how many."""
        owner = self._owner[instance]
        get = owner.get
        hashes, end = run.hashes, run.end
        want = end if n is None else n
        dropped = 0
        while end and dropped < want:
            # The next `want - dropped` entries from the tail hold at most that many live
            # ones, and all of them go: no need to walk them one by one.
            start = max(end - (want - dropped), 0)
            # Live entries (else stale: touched later), filtered at C speed.
            chunk = hashes[start:end]
            live = list(compress(chunk, map(is_, map(get, chunk), repeat(run))))
            deque(map(owner.__delitem__, live), maxlen=0)
            dropped += len(live)
            end = start
        self._entries[instance] -= run.end - end
        run.end = end
        if not end:
            self._runs[instance].popleft()
        return dropped

    def _evict(self, instance: int) -> None:
        owner, runs = self._owner[instance], self._runs[instance]
        if self.capacity_blocks is not None:
            excess = len(owner) - self.capacity_blocks
            while excess > 0:  # runs[0] is the oldest: drop least recently used first
                excess -= self._drop(instance, runs[0], excess)
        cutoff = self._cutoff()
        while runs and runs[0].t < cutoff:
            self._drop(instance, runs[0])
        if self._entries[instance] > 4 * len(owner) + 4096:
            self._compact(instance)

    def _compact(self, instance: int) -> None:
        """Drop stale entries, so memory stays proportional to what the index holds."""
        get = self._owner[instance].get
        runs = self._runs[instance]
        for run in runs:
            run.hashes = [h for h in run.hashes[: run.end] if get(h) is run]
            run.end = len(run.hashes)
        self._runs[instance] = deque(run for run in runs if run.end)
        self._entries[instance] = len(self._owner[instance])

    def lru(self, instance: int) -> list[tuple[int, float]]:
        """(hash, last touch time) of every block held, least recently used first."""
        get = self._ensure(instance).get
        return [
            (h, run.t)
            for run in self._runs[instance]
            for h in reversed(run.hashes[: run.end])
            if get(h) is run
        ]

    def clear(self, instance: int) -> None:
        """Forget everything about an instance (restarted, or its cache was reset)."""
        self._ensure(instance).clear()
        self._runs[instance].clear()
        self._entries[instance] = 0

    def blocks(self, instance: int) -> int:
        """Blocks currently believed cached on `instance` (TTL-expired ones excluded)."""
        owner = self._ensure(instance)
        self._evict(instance)
        return len(owner)

    def matched_blocks(self, block_hashes: Sequence[int], n_instances: int) -> list[int]:
        nb = len(block_hashes)
        cutoff = self._cutoff()
        out = [0] * n_instances
        if nb == 0:
            return out
        first, last = block_hashes[0], block_hashes[-1]
        # Instances that hold part of the prompt mostly hold the same part (a shared system
        # prompt): the previous instance's answer, checked with two probes, often settles the
        # next one (the answer is unique, so this changes the cost, never the result).
        guess = 0
        for i in range(min(n_instances, len(self._owner))):
            get = self._owner[i].get
            run = get(first)
            if run is None or run.t < cutoff:
                continue  # the common case: this instance never saw the prompt's head
            if self._holes:
                out[i] = self._held(get, cutoff, block_hashes, 0, nb)
                continue
            run = get(last)
            if run is not None and run.t >= cutoff:
                out[i] = nb
                continue
            lo, hi = 1, nb - 1  # the answer m is in [lo, hi]: block m-1 held, block m absent
            if 1 < guess < nb:
                run = get(block_hashes[guess - 1])
                if run is not None and run.t >= cutoff:
                    lo = guess
                    run = get(block_hashes[guess])
                    if run is None or run.t < cutoff:
                        out[i] = guess
                        continue
                    lo = guess + 1
                else:
                    hi = guess - 1
            out[i] = guess = _held_prefix(get, cutoff, block_hashes, lo, hi)
        return out

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        bs = request.block_size
        return [m * bs for m in self.matched_blocks(request.block_hashes, n_instances)]

    def matched_tokens_at(self, request: RequestView, instance: int) -> int:
        """`matched_tokens(request, instance + 1)[instance]`, probing that instance only."""
        hashes = request.block_hashes
        if not hashes or instance >= len(self._owner):
            return 0
        get, cutoff = self._owner[instance].get, self._cutoff()
        return self._held(get, cutoff, hashes, 0, len(hashes)) * request.block_size


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

    def holds_any(self) -> bool:
        """Whether any instance holds a block."""
        return bool(self._where)

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

    def held_from(self, instance: int, block_hashes: Sequence[int], start: int) -> int:
        """How many consecutive blocks of `block_hashes` from position `start` `instance`
        holds."""
        if instance >= len(self._held) or start >= len(block_hashes):
            return 0
        held = self._held[instance]
        if not held or block_hashes[start] not in held:
            return 0
        flags = list(map(held.__contains__, islice(block_hashes, start, None)))
        try:
            return flags.index(False)
        except ValueError:
            return len(flags)

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


def _field(event: Any, name: str, default: Any = None) -> Any:
    """A field of a vLLM event object (msgspec struct) or of the same event as a dict."""
    if isinstance(event, Mapping):
        return event.get(name, default)
    return getattr(event, name, default)


# KV-event `medium` names -> the router's tiers. vLLM's GPU events carry None or "GPU"; its
# OffloadingConnector's self-describing events name "CPU" (llm-d weighs "cpu_pinned", SGLang
# HiCache and Dynamo publish "CPU_PINNED"); disk-like stores publish "DISK" or, in vLLM's
# tiering spec, "FS" / "OBJ" (docs/policies.md).
MEDIUM_TIERS: dict[str, str] = {
    "gpu": "hbm",
    "cpu": "host",
    "cpu_pinned": "host",
    "host": "host",
    "disk": "disk",
    "fs": "disk",
    "obj": "disk",
    "storage": "disk",  # vLLM's MEDIUM_STORAGE: SimpleCPUOffloadConnector's disk backend
}
TIERS = ("hbm", "host", "disk")


def medium_tier(medium: str | None) -> str:
    """The tier (hbm / host / disk) a KV event's `medium` names; None is the GPU."""
    if medium is None:
        return "hbm"
    got = MEDIUM_TIERS.get(str(medium).lower())
    if got is None:
        raise ValueError(
            f"KV event medium {medium!r} is not known; known: {sorted(MEDIUM_TIERS)} "
            "(add it to cache.prefix_index.MEDIUM_TIERS)"
        )
    return got


class ExactPrefixIndex:
    """The exact cache view's index: a `BlockIndex` per tier kept up to date from vLLM KV
    events.

    Events name blocks by vLLM's own hashes, requests by the router's keys (`hashing.py`). A
    BlockStored event carries its blocks' token ids and its parent block's engine hash, so the
    stored blocks are re-keyed with the router's hash by continuing the parent's key
    (`extend_block_hashes`): the router never needs vLLM's hash recipe, and a request's keys
    match exactly the blocks the engine reports.

    Each event's `medium` names its tier (`medium_tier`): None or "GPU" is HBM, what vLLM's
    prefix lookup reuses and what `index` / `matched_tokens` answer; "CPU" (host memory) and
    "DISK" (or "FS"/"OBJ") go to `tiers["host"]` / `tiers["disk"]`, which `tier_hits` reads
    after the HBM prefix. A parent may sit in any tier (an offloaded block's parent is often
    still on the GPU), so the engine -> router key of a block is looked up in every tier's
    map of that instance.

    A stored block whose parent this index never saw (events lost, or the subscriber started
    late) cannot be keyed; it is skipped and counted in `unkeyed_blocks`, so the view can
    under-report (never over-report) that instance until the prefix is stored again.

    `engine_keys=True`: the engine names blocks by the keys requests carry (the simulator,
    whose engine hashes are the router's keys), so an event's hashes are used as they are,
    with or without token ids.
    """

    def __init__(self, n_instances: int, block_size: int = 16, engine_keys: bool = False) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.engine_keys = engine_keys
        self.tiers: dict[str, BlockIndex] = {t: BlockIndex(n_instances) for t in TIERS}
        self.index = self.tiers["hbm"]
        # Per tier, per instance: engine hash -> router key of the blocks that tier holds.
        self._keys: dict[str, list[dict[int, int]]] = {
            t: [{} for _ in range(n_instances)] for t in TIERS
        }
        self.unkeyed_blocks = 0
        self.events = 0

    def _held(self, instance: int, tier: str = "hbm") -> dict[int, int]:
        if instance < 0:
            raise IndexError(f"instance index must be >= 0, got {instance}")
        for t in TIERS:
            self.tiers[t]._ensure(instance)
            keys = self._keys[t]
            while instance >= len(keys):
                keys.append({})
        return self._keys[tier][instance]

    def _router_key(self, instance: int, engine_hash: int) -> int | None:
        for t in TIERS:
            got = self._keys[t][instance].get(engine_hash)
            if got is not None:
                return got
        return None

    def apply(self, instance: int, event: Any) -> None:
        """Apply one event (BlockStored / BlockRemoved / AllBlocksCleared) from `instance`.

        The kind is the event's class name, or a dict's "type" key; anything else is an error
        that names it (a silently ignored event would leave the view wrong), as is a medium
        no tier is known for.
        """
        kind = event.get("type") if isinstance(event, Mapping) else type(event).__name__
        self.events += 1
        medium = _field(event, "medium")
        if kind == "AllBlocksCleared":
            if medium is None:
                self.clear(instance)
            else:
                self.clear(instance, medium_tier(medium))
        elif kind not in ("BlockStored", "BlockRemoved"):
            raise ValueError(f"instance {instance}: unknown KV event type {kind!r}")
        elif kind == "BlockStored":
            self._stored(instance, event, medium_tier(medium))
        else:
            tier = medium_tier(medium)
            held = self._held(instance, tier)
            hashes = [int(h) for h in _field(event, "block_hashes", [])]
            self.tiers[tier].remove(instance, [held.pop(h) for h in hashes if h in held])

    def _stored(self, instance: int, event: Any, tier: str) -> None:
        size = int(_field(event, "block_size", self.block_size))
        if size != self.block_size:
            raise ValueError(
                f"instance {instance}: KV event block_size {size} differs from the router's "
                f"{self.block_size}; set the router's block size to the engine's"
            )
        engine_hashes = [int(h) for h in _field(event, "block_hashes", [])]
        held = self._held(instance, tier)
        if self.engine_keys:
            held.update(zip(engine_hashes, engine_hashes, strict=True))
            self.tiers[tier].add(instance, engine_hashes)
            return
        tokens = list(_field(event, "token_ids", []))
        if not tokens and tier != "hbm":
            # An offload event without token ids: its blocks are known by their engine hashes
            # (stored on the GPU first), keyed as they were there.
            keys = [self._router_key(instance, h) for h in engine_hashes]
            known = [(e, k) for e, k in zip(engine_hashes, keys, strict=True) if k is not None]
            self.unkeyed_blocks += len(engine_hashes) - len(known)
            held.update(known)
            self.tiers[tier].add(instance, [k for _, k in known])
            return
        if len(tokens) != size * len(engine_hashes):
            raise ValueError(
                f"instance {instance}: BlockStored has {len(tokens)} token ids for "
                f"{len(engine_hashes)} blocks of {size}"
            )
        parent = _field(event, "parent_block_hash")
        start = None
        if parent is not None:
            start = self._router_key(instance, int(parent))
            if start is None:
                self.unkeyed_blocks += len(engine_hashes)
                return
        keys = extend_block_hashes(start, tokens, size)
        held.update(zip(engine_hashes, keys, strict=True))
        self.tiers[tier].add(instance, keys)

    def clear(self, instance: int, tier: str | None = None) -> None:
        """Forget what `instance` holds in `tier` (None: every tier)."""
        self._held(instance)
        for t in TIERS if tier is None else (tier,):
            self._keys[t][instance].clear()
            self.tiers[t].clear(instance)

    def blocks(self, instance: int, tier: str = "hbm") -> int:
        self._held(instance)
        return self.tiers[tier].blocks(instance)

    def holds_below_hbm(self) -> bool:
        """Whether any instance holds a block in host memory or on disk (an event with such
        a medium stored it and none removed it since)."""
        return self.tiers["host"].holds_any() or self.tiers["disk"].holds_any()

    def keys(self, instance: int, tier: str = "hbm") -> set[int]:
        """The router keys of the blocks `instance` holds in `tier` (a copy)."""
        return set(self._held(instance, tier).values())

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        return self.index.matched_tokens(request, n_instances)

    def tier_hits(self, request: RequestView, n_instances: int) -> list[TierHits]:
        """Per instance: HBM prefix, then the host blocks after it, then the disk blocks after
        those (tokens, whole blocks)."""
        hashes, bs = request.block_hashes, request.block_size
        hbm = self.index.matched_blocks(hashes, n_instances)
        host, disk = self.tiers["host"], self.tiers["disk"]
        out = []
        for i, m in enumerate(hbm):
            h = host.held_from(i, hashes, m)
            d = disk.held_from(i, hashes, m + h)
            out.append(TierHits(m * bs, h * bs, d * bs))
        return out
