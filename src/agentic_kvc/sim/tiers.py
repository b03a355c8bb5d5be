"""KV tiers below HBM for the simulated fleet: host memory and disk (issue 29; docs/kv_tiers.md).

What vLLM 0.32 does, and what is modelled (the code read is cited in docs/kv_tiers.md):
- Moving down. `SimpleCPUOffloadConnector` in lazy mode copies cached GPU blocks to host as a
  cursor walks the GPU free queue, up to `lazy_walk_blocks` a step; `OffloadingConnector` (and
  the simple one in eager mode) stores every block once computed. Here: with `write_through`
  off, blocks go down when HBM evicts them (`BlockPool.on_evict`), and also when a turn ends if
  the walk is as long as the HBM pool (then it reaches every freed block at the next step;
  docs/kv_tiers.md, "When the lazy mode stores"); with it on, a turn's full blocks are stored
  when it finishes. A block evicted from the host tier goes to
  the disk tier when there is one. Each write is a transfer on its link (device->host, or the
  disk's write side), FIFO behind that link's others.
- Finding and reloading. The scheduler first takes the HBM prefix hit, then asks the connector
  (`get_num_new_matched_tokens`) for the tokens right after it; a hit there is loaded
  asynchronously: the request gets its blocks, waits in WAITING_FOR_REMOTE_KVS while the engine
  steps the others, and is scheduled again once the load is done. Here: after the HBM prefix,
  the host tier's contiguous run, then the disk tier's; both loads start when the request is
  admitted, each FIFO on its link (host->device; the disk store's read side), and the request
  waits for the later one. Loads of blocks whose write has not landed yet wait for it.
- Each tier evicts by its own policy: LRU, in the order of the connector modelled
  (`TierStore.simple_lru`: with write-through off, the simple connector's, which leaves blocks
  it holds already where they are and, after a load, evicts the loaded prompt's head first;
  with it on, the offloading connector's, which touches a request's blocks tail first so a
  prompt's head is evicted last), or "retention": blocks of a session in a tool pause (a turn
  that ended in a tool call) are evicted only after every other block, for
  `sim.kv_retention_ttl_s` after the turn's end (the HBM retention of sim/engine.py, applied
  to the tier).

Each tier's blocks are a `cache.tier_store.TierStore` (runs of chained hashes, LRU by run);
this module adds what the engine's side needs: the links a reload takes (`InstanceTiers`) and
the fleet's stores, a host tier per instance and the disk stores by scope (`FleetTiers`).

KV events. With a sink wired by `FleetTiers.publish`, each store reports what enters and leaves
it as vLLM's KV events do (cache/tier_store.py); the simulator's exact view keeps its map of
the tiers from them (sim/fleet.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from agentic_kvc.cache.tier_store import Link, TierStore
from agentic_kvc.config import ConfigError, KVTiersConfig
from agentic_kvc.profiles.hardware import TierLinks

if TYPE_CHECKING:
    from agentic_kvc.profiles.cost import EngineProfile

GIB = 1024**3


class InstanceTiers:
    """One instance's view of the tiers below its HBM: its host tier and the disk store it
    shares with its node or fleet (or owns), with the links a reload takes."""

    __slots__ = (
        "block_bytes",
        "disk",
        "h2d",
        "host",
        "store_after_allocations",
        "store_at_free",
        "top",
        "write_through",
    )

    def __init__(
        self,
        host: TierStore | None,
        h2d: Link | None,
        disk: TierStore | None,
        block_bytes: int,
        write_through: bool,
        store_at_free: bool = False,
        store_after_allocations: bool = False,
    ) -> None:
        self.host = host
        self.h2d = h2d
        self.disk = disk
        self.top = host if host is not None else disk  # where HBM's blocks go first
        self.block_bytes = block_bytes
        # `write_through`: nothing is stored at HBM eviction. `store_at_free`: a turn's full
        # blocks are stored when it ends (write-through, or a lazy walk that covers the pool).
        self.write_through = write_through
        self.store_at_free = write_through or store_at_free
        # vLLM's lazy walk stores a freed block at the next scheduler step, after that step's
        # allocations (`Scheduler.schedule` allocates before `build_connector_meta` walks):
        # blocks a waiting request takes then are never stored (sim/engine.py, `_turn_end`).
        self.store_after_allocations = (
            store_at_free and store_after_allocations and not write_through
        )

    def runs(self, hashes: Sequence[int], start: int, stop: int) -> tuple[int, int]:
        """Blocks after an HBM hit of `start` blocks: (from host, then from disk)."""
        host = self.host.run(hashes, start, stop) if self.host is not None else 0
        disk = self.disk.run(hashes, start + host, stop) if self.disk is not None else 0
        return host, disk

    def hold(self, hashes: Sequence[int], until: float) -> None:
        """Retention: a session's prompt blocks, held below HBM until `until` (its pause)."""
        for store in (self.host, self.disk):
            if store is not None:
                store.hold(hashes, until)

    def offload(self, log: list[tuple[int, list[int], bool]], now: float) -> None:
        """Blocks HBM evicted: runs (first chain position, hashes, whether they may also be
        stored here), in eviction order (the first evicted is the oldest here too).

        Blocks never loaded from a tier can be stored there only if HBM recomputed them past
        a gap in the tier (rare: a prompt's runs are evicted tail first). Those are checked at
        the run's first block and indexed positions only: a stored run overlapping them
        unseen lies between two indexed positions, so fewer than MARK blocks may be held
        twice, which costs capacity, never a hit (each run keeps its own index entries).
        Not so when turns are stored as they end (`store_at_free`): most evicted blocks are
        held then, so each is checked in full."""
        top = self.top
        assert top is not None
        runs = [(lo, hs) for lo, hs, _ in log]
        top.put(runs, now, None if self.store_at_free else [not b for _lo, _hs, b in log])

    def claim(self, hashes: Sequence[int], a: int, host: int, disk: int) -> tuple[float, float]:
        """A request will load blocks [a, a + host) from host and the next `disk` from disk:
        they are used now (vLLM touches them at lookup and pins them for the load). Returns
        when their writes land (host, disk)."""
        ready = (0.0, 0.0)
        if host:
            assert self.host is not None
            ready = (self.host.touch(hashes, a, a + host), 0.0)
        if disk:
            assert self.disk is not None
            ready = (ready[0], self.disk.touch(hashes, a + host, a + host + disk))
        return ready

    def reload(self, host: int, disk: int, ready: tuple[float, float], now: float) -> float:
        """Load `host` blocks from host and `disk` from disk, each FIFO on its link from `now`
        (and not before its write landed, `ready`); when both have landed."""
        end = now
        if host:
            assert self.h2d is not None
            end = self.h2d.send(now, host * self.block_bytes, ready[0])
        if disk:
            assert self.disk is not None
            end = max(end, self.disk.read.send(now, disk * self.block_bytes, ready[1]))
        return end


class FleetTiers:
    """The tiers of a whole fleet, built from `fleet.kv_tiers` and the hardware's links."""

    def __init__(
        self,
        cfg: KVTiersConfig,
        links: TierLinks,
        profile: EngineProfile,
        block_size: int,
        n_instances: int,
        retention_ttl_s: float,
        lazy_walk_covers_pool: bool = False,
        store_after_allocations: bool = False,
    ) -> None:
        """`lazy_walk_covers_pool`: a lazy tier stores every block when it is freed (vLLM's
        lazy walk is as long as the HBM pool, or the simulator's bound `free`), as well as at
        eviction; `store_after_allocations`: at the next scheduler step, after its allocations,
        as vLLM's walk does (not the bound). Retention with `retention_ttl_s` 0 holds nothing;
        a run config refuses it (`RunConfig`)."""
        self.cfg = cfg
        self.retention = cfg.eviction == "retention"
        self.retention_ttl_s = retention_ttl_s
        block_bytes = profile.kv_bytes_per_token * block_size
        self.block_bytes = block_bytes

        def blocks(gib: float, field: str) -> int:
            n = int(gib * GIB // block_bytes)
            if n < 1:
                raise ConfigError(
                    f"field 'fleet.kv_tiers.{field}': {gib} GiB holds no KV block of "
                    f"{block_bytes} bytes ({block_size} tokens x {profile.kv_bytes_per_token})"
                )
            return n

        pick = lambda value, default: default if value is None else value  # noqa: E731
        h2d = pick(cfg.host_h2d_gbps, links.host_h2d_gbps)
        d2h = pick(cfg.host_d2h_gbps, links.host_d2h_gbps)
        host_lat = pick(cfg.host_latency_s, links.host_latency_s)
        d_read = pick(cfg.disk_read_gbps, links.disk_read_gbps)
        d_write = pick(cfg.disk_write_gbps, links.disk_write_gbps)
        d_lat = pick(cfg.disk_latency_s, links.disk_latency_s)
        self.links = {
            "host_h2d_gbps": h2d,
            "host_d2h_gbps": d2h,
            "host_latency_s": host_lat,
            "disk_read_gbps": d_read,
            "disk_write_gbps": d_write,
            "disk_latency_s": d_lat,
        }
        # Disk stores: one per instance, per node, or one for the fleet.
        self.disks: list[TierStore] = []
        disk_of: list[TierStore | None] = [None] * n_instances
        if cfg.disk_gib > 0:
            per = {
                "instance": 1,
                "node": links.instances_per_node or n_instances,
                "fleet": n_instances,
            }[cfg.disk_scope]
            cap = blocks(cfg.disk_gib, "disk_gib")
            for i in range(n_instances):
                if i % per == 0:
                    self.disks.append(
                        TierStore(
                            f"disk{len(self.disks)}",
                            cap,
                            block_bytes,
                            Link(d_write, d_lat),
                            Link(d_read, d_lat),
                            self.retention,
                            simple_lru=not cfg.write_through,
                        )
                    )
                    self.disks[-1].medium = "DISK"
                disk_of[i] = self.disks[-1]
        self.disk_of = disk_of
        self.shared_disk = bool(self.disks) and cfg.disk_scope != "instance"
        self.instances: list[InstanceTiers] = []
        for i in range(n_instances):
            host = h2d_link = None
            if cfg.host_gib > 0:
                host = TierStore(
                    f"host{i}",
                    blocks(cfg.host_gib, "host_gib"),
                    block_bytes,
                    Link(d2h, host_lat),
                    Link(h2d, host_lat),
                    self.retention,
                    below=disk_of[i],
                    simple_lru=not cfg.write_through,
                )
                h2d_link = host.read
            self.instances.append(
                InstanceTiers(
                    host,
                    h2d_link,
                    disk_of[i],
                    block_bytes,
                    cfg.write_through,
                    store_at_free=lazy_walk_covers_pool,
                    store_after_allocations=store_after_allocations,
                )
            )

    def publish(self, apply: Callable[[int, dict[str, Any]], None]) -> None:
        """Report every store's KV events (module docstring) as `apply(instance, event)`: a
        host tier's to its instance, a disk store's to each instance that reads it."""
        for i, it in enumerate(self.instances):
            if it.host is not None:
                it.host.publish(partial(apply, i))
        for disk in self.disks:
            members = [i for i, d in enumerate(self.disk_of) if d is disk]

            def each(event: dict[str, Any], members: list[int] = members) -> None:
                for i in members:
                    apply(i, event)

            disk.publish(each)
