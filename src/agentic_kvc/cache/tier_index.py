"""The router's estimate of which KV tier holds a prompt's blocks (issue 29, item 2).

`TieredPrefixIndex` extends the estimated prefix index (`ChainedPrefixIndex`: every routed
prompt recorded for the instance that prefilled it, an LRU per instance sized by the engine's
KV blocks) with the tiers below HBM, the way llm-d's approximate scorer models a CPU tier: an
LRU per server whose capacity is set from the tier's size (`lruCapacityPerServer`, by hand,
since vLLM does not report its CPU blocks; llm-d guides/tiered-prefix-cache/cpu). Here:

- per instance an HBM LRU (capacity: the engine's KV blocks), as the estimated view has always
  kept;
- per instance a host-memory LRU (capacity: `fleet.kv_tiers.host_gib` in blocks), fed as the
  engine's offloading is configured (the simulator's engine does the same,
  sim/tiers.py):
  - on eviction (`write_through=False`, vLLM's lazy CPU offload): the blocks the HBM LRU
    evicts are stored in the host LRU (the evicted tail is its least recent part);
  - write-through (vLLM's `OffloadingConnector` stores every block a request computes): every
    routed prompt's blocks are put in the host LRU too (the disk's, with no host tier), and
    HBM evictions add nothing;
  - both (`store_at_free`: a lazy walk that covers the HBM pool stores every freed block, and
    the simulator's `lazy_store: free`): the routed prompt is put in the host LRU at `record`,
    and HBM evictions store what it lacks;
  a reload leaves the host copy where it is (vLLM's CPU blocks are a cache) and makes it the
  most recent, in the engine's order (the tier store's `simple_lru`, as the simulated engine
  sets it: with write-through off the loaded prompt's head is the first to go);
- optionally a disk LRU per instance, per node or one for the fleet (`disk_scope`), fed by the
  host LRU's evictions, read by every instance that shares it.

Each lower tier is the tier store the simulated engine uses too (`cache.tier_store.TierStore`:
blocks kept as runs of a prompt's chain, LRU by run, a run eaten from its tail, overflow handed
to the tier below), its links unused: the per-block work is list slicing, not a dict entry per
block.

`tier_hits(request, n)` answers, per instance, the HBM prefix (what `matched_tokens` gives), then
how many of the following blocks the host LRU holds, then how many after those the disk holds:
vLLM's order (HBM prefix hit first, then the offloading connector for the rest).

With no tier (host and disk capacity 0) it answers exactly as `ChainedPrefixIndex` (the HBM
index is one, and nothing else runs), so a run without tiers keeps its records.

What it cannot know, beyond what the HBM estimate cannot (docs/policies.md): whether a
reload finished or failed, the engine's real eviction order in the host tier (vLLM's CPU
manager is an LRU too; HiCache's too), and blocks another router put on a shared disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentic_kvc.cache.chain_index import ChainedPrefixIndex
from agentic_kvc.cache.tier_store import MARK, Link, Run, TierStore
from agentic_kvc.policy.base import RequestView, TierHits

if TYPE_CHECKING:
    from agentic_kvc.config import KVTiersConfig

GIB = 1 << 30


def tier_blocks(gib: float, kv_bytes_per_token: float, block_size: int) -> int:
    """Whole KV blocks that `gib` GiB hold (0 when the tier is off)."""
    if gib <= 0:
        return 0
    if kv_bytes_per_token <= 0 or block_size < 1:
        raise ValueError(
            f"tier_blocks: kv_bytes_per_token ({kv_bytes_per_token}) must be > 0 and "
            f"block_size ({block_size}) >= 1"
        )
    return int(gib * GIB // (kv_bytes_per_token * block_size))


def disk_groups(n_instances: int, scope: str, instances_per_node: int | None) -> list[int]:
    """The disk store each instance uses: its own (`instance`), its node's (`node`, nodes of
    `instances_per_node`; None: one host for the whole fleet) or the fleet's (`fleet`)."""
    if scope == "instance":
        return list(range(n_instances))
    if scope == "fleet" or instances_per_node is None:
        return [0] * n_instances
    if scope != "node":
        raise ValueError(f"field 'fleet.kv_tiers.disk_scope': unknown scope {scope!r}")
    if instances_per_node < 1:
        raise ValueError(f"instances_per_node must be >= 1, got {instances_per_node}")
    return [i // instances_per_node for i in range(n_instances)]


def _own(hashes: Sequence[int]) -> list[int]:
    """A list a store may keep and trim: the HBM index's eviction callback hands over a fresh
    slice of its run (a list when the run is one), kept as it is; any other sequence is
    copied (a store trims its runs' lists in place when it evicts)."""
    return hashes if type(hashes) is list else list(hashes)


def _store(capacity: int, simple_lru: bool, below: TierStore | None = None) -> TierStore:
    """A tier of the router's model: the simulator's tier store (runs of blocks, LRU by run
    in the order of the connector modelled, `simple_lru`; overflow handed `below`), its links
    unused (the model keeps no time)."""
    idle = Link(1.0, 0.0)
    return TierStore("router", capacity, 1, idle, idle, below=below, simple_lru=simple_lru)


class TieredPrefixIndex:
    """The estimated view with tiers below HBM (module docstring). A `RecordingCacheView`
    that also answers `tier_hits`."""

    def __init__(
        self,
        n_instances: int,
        hbm_blocks: int | None,
        host_blocks: int = 0,
        disk_blocks: int = 0,
        disk_group: Sequence[int] | None = None,
        write_through: bool = False,
        ttl_s: float | None = None,
        store_at_free: bool = False,
        hbm: ChainedPrefixIndex | None = None,
    ) -> None:
        """`hbm`: an HBM estimate kept so far, to extend with the tiers (the proxy learns an
        engine's tier from its metrics after the first requests; `hbm_blocks` and `ttl_s`
        are then the estimate's own)."""
        if hbm is not None and hbm.n_instances != n_instances:
            raise ValueError(f"hbm estimate has {hbm.n_instances} instances, not {n_instances}")
        if disk_group is not None and len(disk_group) != n_instances:
            raise ValueError(
                f"disk_group has {len(disk_group)} entries for {n_instances} instances"
            )
        if host_blocks < 0 or disk_blocks < 0:
            raise ValueError(f"tier capacities must be >= 0, got {host_blocks}, {disk_blocks}")
        self.hbm = hbm if hbm is not None else ChainedPrefixIndex(n_instances, hbm_blocks, ttl_s)
        self.write_through = write_through
        # Without write-through, the engine may still store a turn's blocks when they are
        # freed (a lazy walk over its whole pool, or the simulator's `lazy_store: free`):
        # the routed prompt then goes to the top tier below HBM at `record` too, after its
        # load, and HBM's evictions still store what is missing (sim/tiers.py).
        self.store_at_free = store_at_free and not write_through
        group = list(disk_group) if disk_group is not None else [0] * n_instances
        self.disk_group = group
        self.disk = (
            [_store(disk_blocks, not write_through) for _ in range(max(group) + 1)]
            if disk_blocks
            else []
        )
        self.host_blocks = host_blocks
        self.host = [self._host_store(i) for i in range(n_instances)] if host_blocks else []
        if self.host and not write_through:
            self.hbm.on_evict = self._demote
        elif self.disk and not self.host:
            self.hbm.on_evict = self._to_disk  # no host tier: HBM evictions go to disk
        self._now = 0.0
        # The last `tier_hits` probe, for the `record` of the instance it chose (the router
        # records right after routing): the prompt's hash list, the HBM prefix per instance,
        # and per instance the host walk after it (its end and runs; None: nothing held).
        # `record` then uses those runs instead of probing HBM and walking the host again.
        # Dropped by anything that changes the tiers in between (`record`, `clear`,
        # `advance`); with write-through `record` stores the prompt first, so it is not kept.
        self._probe: tuple[Sequence[int], list[int], list[tuple[int, list[Run]] | None]] | None
        self._probe = None

    def _host_store(self, instance: int) -> TierStore:
        below = self.disk[self.disk_group[instance]] if self.disk else None
        return _store(self.host_blocks, not self.write_through, below)

    @property
    def n_instances(self) -> int:
        return self.hbm.n_instances

    @property
    def capacity_blocks(self) -> int | None:
        return self.hbm.capacity_blocks

    @capacity_blocks.setter
    def capacity_blocks(self, blocks: int | None) -> None:
        self.hbm.capacity_blocks = blocks  # the proxy learns it from the engine's metrics

    # ---- feeding ------------------------------------------------------------------------

    def _demote(self, instance: int, lo: int, hashes: Sequence[int]) -> None:
        """HBM evicted these blocks (chain positions lo, lo + 1, ...): into host (its
        overflow into the disk store below)."""
        self.host[instance].put([(lo, _own(hashes))], self._now)

    def _to_disk(self, instance: int, lo: int, hashes: Sequence[int]) -> None:
        self.disk[self.disk_group[instance]].put([(lo, _own(hashes))], self._now)

    def advance(self, now: float) -> None:
        self._probe = None
        self.hbm.advance(now)

    def record(self, instance: int, block_hashes: Sequence[int], now: float) -> None:
        """The router sent a prompt with these full blocks to `instance` at time `now`."""
        self._now = now
        n = len(block_hashes)
        probe, self._probe = self._probe, None
        if n and (self.host or self.disk):
            if self.write_through:  # into the top tier below HBM, as the engine stores
                self._store_below(instance, block_hashes, now)
            # The runs after the HBM hit that the engine reloads are used now (most recent).
            if probe is not None and probe[0] is block_hashes and instance < len(probe[1]):
                # `tier_hits` just walked this prompt, and nothing changed since: its answer.
                m = probe[1][instance]
                walk = probe[2][instance]
                if walk is not None:
                    m, runs = walk
                    self.host[instance].use(runs)
            else:
                m = self.hbm.held_blocks(instance, block_hashes)
                if self.host and m < n:
                    m = self.host[instance].use_held(block_hashes, m, n)
            if self.disk and m < n:
                self.disk[self.disk_group[instance]].use_held(block_hashes, m, n)
            if self.store_at_free:
                self._store_below(instance, block_hashes, now)
        self.hbm.record(instance, block_hashes, now)

    def demote(
        self, instance: int, block_hashes: Sequence[int], now: float, store_below: bool = False
    ) -> None:
        """The engine released this prompt's blocks to the head of its free queue: HBM's
        estimate makes them the least recently used (`ChainedPrefixIndex.demote`). With
        `store_below` (pause-aware demotion, `sim.engine.Instance._demote`) the prompt is
        first written to the top tier below HBM, unless write-through stored it already."""
        self._probe = None
        self._now = now
        if store_below and block_hashes and not self.write_through:
            self._store_below(instance, block_hashes, now)
        self.hbm.demote(instance, block_hashes, now)

    def _store_below(self, instance: int, block_hashes: Sequence[int], now: float) -> None:
        """Write a prompt to the top tier below HBM: the instance's host tier, else its disk
        store (none: nothing to write)."""
        top = self.host[instance] if self.host else None
        if top is None and self.disk:
            top = self.disk[self.disk_group[instance]]
        if top is not None:
            top.put([(0, list(block_hashes))], now)  # copied: stores trim their lists

    def clear(self, instance: int) -> None:
        """Forget an instance's HBM and host tiers (a shared disk keeps what it holds)."""
        self._probe = None
        self.hbm.clear(instance)
        if self.host:
            self.host[instance] = self._host_store(instance)

    # ---- querying -----------------------------------------------------------------------

    def blocks(self, instance: int) -> int:
        """HBM blocks believed cached on `instance` (as the estimated view)."""
        return self.hbm.blocks(instance)

    def tier_blocks(self, instance: int) -> TierHits:
        """Blocks believed held by `instance` per tier (disk: its shared store's)."""
        return TierHits(
            self.hbm.blocks(instance),
            len(self.host[instance]) if self.host else 0,
            len(self.disk[self.disk_group[instance]]) if self.disk else 0,
        )

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        return self.hbm.matched_tokens(request, n_instances)

    def matched_tokens_at(self, request: RequestView, instance: int) -> int:
        return self.hbm.matched_tokens_at(request, instance)

    def tier_hits(self, request: RequestView, n_instances: int) -> list[TierHits]:
        """Per instance: the HBM prefix, then the host blocks after it, then the disk blocks
        after those, in tokens (whole blocks)."""
        hashes, bs = request.block_hashes, request.block_size
        hbm = self.hbm.matched_blocks(hashes, n_instances)
        host, disk, group = self.host, self.disk, self.disk_group
        if not host and not disk:
            return [TierHits(m * bs) for m in hbm]
        n = len(hashes)
        out = []
        walks: list[tuple[int, list[Run]] | None] = [None] * len(hbm)
        # Most instances' host tier holds nothing after their HBM prefix: the run holding
        # block m, if any, has an index key among blocks m - m % MARK .. m (`TierStore._find`),
        # so a store whose index has none of them answers 0 without a walk. Instances mostly
        # share m (a shared prefix, or none), so the probe is sliced once per m.
        at, probe = -1, hashes[:0]
        for i, m in enumerate(hbm):
            h = 0
            if host and m < n:
                if m != at:
                    at, probe = m, hashes[m - m % MARK : m + 1]
                if not host[i].index.keys().isdisjoint(probe):
                    walks[i] = walk = host[i].walk(hashes, m, n)
                    h = walk[0] - m
            d = disk[group[i]].run(hashes, m + h, n) if disk and m + h < n else 0
            out.append(TierHits(m * bs, h * bs, d * bs))
        if host and not self.write_through:
            self._probe = (hashes, hbm, walks)
        return out


def estimated_view(
    n_instances: int,
    hbm_blocks: int,
    block_size: int,
    kv_tiers: KVTiersConfig,
    kv_bytes_per_token: float,
    hardware: str,
    store_at_free: bool = False,
) -> ChainedPrefixIndex | TieredPrefixIndex:
    """The router's estimated view for a fleet: `ChainedPrefixIndex` without tiers (as
    always), else a `TieredPrefixIndex` sized from `fleet.kv_tiers` (host GiB per instance;
    disk GiB per store of its scope, a node being the hardware profile's
    `instances_per_node`). The real proxy builds the same with `--tier-view`, sized as the
    engines state in their metrics (`proxy/cache_view.with_engine_tier`). `store_at_free`: the
    engine also stores a turn's blocks when they are freed (`TieredPrefixIndex.store_at_free`)."""
    if not kv_tiers.enabled:
        return ChainedPrefixIndex(n_instances, hbm_blocks)
    host = tier_blocks(kv_tiers.host_gib, kv_bytes_per_token, block_size)
    disk = tier_blocks(kv_tiers.disk_gib, kv_bytes_per_token, block_size)
    per_node = None
    if disk and kv_tiers.disk_scope == "node":
        from agentic_kvc.profiles.hardware import tier_links  # loads lazily

        try:
            per_node = tier_links(hardware).instances_per_node
        except ValueError:  # no profile links (all given in the config): one host, as the sim
            per_node = None
    return TieredPrefixIndex(
        n_instances,
        hbm_blocks,
        host,
        disk,
        disk_groups(n_instances, kv_tiers.disk_scope, per_node),
        kv_tiers.write_through,
        store_at_free=store_at_free,
    )
