"""The exact cache view: each instance's real prefix cache, followed through vLLM KV events.

vLLM started with `--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
"endpoint": "tcp://HOST:PORT", "topic": "kv-events"}'` publishes, after each engine step, a
multipart ZMQ message `[topic, seq (8 bytes, big-endian), msgpack(KVEventBatch)]`. A batch is
`[ts, [event, ...], dp_rank?]`; each event is a map tagged `"type"`: BlockStored (engine block
hashes, parent hash, token ids, block size, medium), BlockRemoved, AllBlocksCleared.
`serve/kv_transfer_flags.py` gives the flags (and a fixed PYTHONHASHSEED with the CBOR hash, so
hashes are stable across processes and restarts).

Events name blocks by vLLM's hashes, requests carry the router's keys (`hashing.py`). A
BlockStored event carries its blocks' token ids and its parent's engine hash, so each stored
block is re-keyed with the router's hash by continuing the parent's key
(`extend_block_hashes`): the router never re-implements vLLM's hash recipe, and a request's
keys match exactly the blocks the engine reports. `cache.prefix_index.ExactPrefixIndex` keeps
that mapping per instance; `ExactCacheView` adds what a policy needs on the proxy's event
loop: events decoded without importing vLLM, sequence gaps counted, the engine's block size
adopted, and vLLM's lookup rule (a hit never covers the prompt's last token, and counts whole
blocks), so its prediction is the engine's `cached_tokens`, not an upper bound.
`KVEventSubscriber` feeds it from one SUB socket per instance, as an asyncio task.

Tiers below HBM (issue 29). Each event's `medium` says which tier it is about: None / "GPU"
is HBM; "CPU" (vLLM's OffloadingConnector with `self_describing_kv_events`, llm-d's
"cpu_pinned", SGLang HiCache's "CPU_PINNED") is host memory; "DISK" / "FS" / "OBJ" is disk
(`prefix_index.MEDIUM_TIERS`; an unknown medium is an error naming it). The view keeps one
block map per tier and instance, and answers, besides `matched_tokens` (HBM only, as before):

    view.tier_hits(request, n_instances) -> list[TierHits]   # per instance: hbm, host, disk
    view.blocks(instance, tier="hbm")                        # blocks held in that tier

`tier_hits` takes the HBM prefix first, then the host blocks right after it, then the disk
blocks after those, as vLLM's scheduler does (its prefix hit, then the connector's), capped
by vLLM's lookup rule (never the last prompt token). A proxy that routes on tiers needs no
other change: `FleetView.tier_hits` asks this method.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from agentic_kvc.aio import cancel_and_wait
from agentic_kvc.cache.prefix_index import ExactPrefixIndex
from agentic_kvc.policy.base import RequestView, TierHits

log = logging.getLogger("agentic_kvc.kv_events")
_unpack = msgspec.msgpack.Decoder().decode


class KVEventError(ValueError):
    """A KV-event message that cannot be read (names the instance and what was wrong)."""


def decode_batch(instance: int, payload: bytes) -> list[Any]:
    """The events of one msgpack-encoded KVEventBatch, as dicts with a "type" key."""
    try:
        batch = _unpack(payload)
    except msgspec.DecodeError as exc:
        raise KVEventError(f"instance {instance}: KV event batch is not msgpack: {exc}") from exc
    if not (isinstance(batch, list) and len(batch) >= 2 and isinstance(batch[1], list)):
        raise KVEventError(f"instance {instance}: expected [ts, [events...]], got {batch!r:.120}")
    return batch[1]


@dataclass(slots=True)
class _Stream:
    last_seq: int | None = None
    gaps: int = 0  # batches known lost (sequence numbers skipped)
    batches: int = 0


class ExactCacheView:
    """Per-instance block index from KV events; answers the policies' cache query."""

    def __init__(self, n_instances: int, block_size: int = 16) -> None:
        self.n_instances = n_instances
        self.index = ExactPrefixIndex(n_instances, block_size)
        self.streams = [_Stream() for _ in range(n_instances)]
        self._size_known = False

    @property
    def block_size(self) -> int:
        return self.index.block_size

    def set_block_size(self, block_size: int) -> None:
        """Adopt the engine's block size (from /metrics or the first event) while still empty."""
        if block_size == self.index.block_size:
            self._size_known = True
            return
        if any(self.index.blocks(i) for i in range(self.n_instances)):
            raise KVEventError(
                f"engine block size {block_size} differs from the view's {self.block_size} "
                "after blocks were indexed; start the proxy with --block-size"
            )
        self.index = ExactPrefixIndex(self.n_instances, block_size)
        self._size_known = True

    # ---- feeding ------------------------------------------------------------------------

    def apply_message(self, instance: int, seq: int | None, payload: bytes) -> int:
        """Apply one ZMQ message's batch; returns the number of events applied."""
        s = self.streams[instance]
        if seq is not None:
            if s.last_seq is not None and seq > s.last_seq + 1:
                s.gaps += seq - s.last_seq - 1
                log.warning("instance %d: %d KV event batches lost", instance, seq - s.last_seq - 1)
            s.last_seq = seq
        s.batches += 1
        events = decode_batch(instance, payload)
        for ev in events:
            self.apply(instance, ev)
        return len(events)

    def apply(self, instance: int, event: Any) -> None:
        if not self._size_known:
            size = event.get("block_size") if isinstance(event, dict) else None
            if isinstance(size, int) and event.get("type") == "BlockStored":
                self.set_block_size(size)
        self.index.apply(instance, event)

    def record(self, instance: int, block_hashes: Sequence[int], now: float) -> None:
        """Routes teach this view nothing (RouterState never calls it with record_on_route
        off); present so the view fits wherever a recording view does."""

    # ---- querying -----------------------------------------------------------------------

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        """Tokens each instance's prefix cache would give this request, by vLLM's rule: the
        lookup stops before the last prompt token (`max_cache_hit_length = num_tokens - 1`)
        and counts whole blocks."""
        bs = request.block_size
        usable = max(request.input_tokens - 1, 0) // bs
        if usable < len(request.block_hashes):
            request = replace(request, block_hashes=request.block_hashes[:usable])
        return self.index.matched_tokens(request, n_instances)

    def tier_hits(self, request: RequestView, n_instances: int) -> list[TierHits]:
        """Per instance, the prompt's leading tokens in HBM, then host, then disk (contiguous,
        in that order), by vLLM's rule: whole blocks, never the last prompt token."""
        bs = request.block_size
        usable = max(request.input_tokens - 1, 0) // bs
        if usable < len(request.block_hashes):
            request = replace(request, block_hashes=request.block_hashes[:usable])
        return self.index.tier_hits(request, n_instances)

    def blocks(self, instance: int, tier: str = "hbm") -> int:
        """Blocks `instance` holds in `tier` (hbm, host or disk)."""
        return self.index.blocks(instance, tier)

    def holds_below_hbm(self) -> bool:
        """Whether any instance holds a block below HBM: when none does, every `tier_hits`
        answer is the HBM hit with nothing after it, and a caller may skip asking."""
        return self.index.holds_below_hbm()

    def stats(self) -> dict[str, Any]:
        out = {
            "events": self.index.events,
            "unkeyed_blocks": self.index.unkeyed_blocks,
            "lost_batches": sum(s.gaps for s in self.streams),
            "blocks": [self.index.blocks(i) for i in range(self.n_instances)],
        }
        for tier in ("host", "disk"):
            held = [self.index.blocks(i, tier) for i in range(self.n_instances)]
            if any(held):
                out[f"{tier}_blocks"] = held
        return out


class KVEventSubscriber:
    """One ZMQ SUB socket per instance, read by an asyncio task on the proxy's loop.

    Running on the same loop as the policies keeps the index single-threaded: an event batch
    is applied between two routing decisions, never during one. Bind order does not matter
    (the engine's PUB binds, this connects), but events published before the connection is up
    are lost, so start this before sending traffic.
    """

    def __init__(
        self, view: ExactCacheView, endpoints: Sequence[str], topic: str = "kv-events"
    ) -> None:
        if len(endpoints) != view.n_instances:
            raise ValueError(
                f"{len(endpoints)} KV-event endpoints given for {view.n_instances} instances"
            )
        self.view = view
        self.endpoints = list(endpoints)
        self.topic = topic.encode()
        self._tasks: list[asyncio.Task[None]] = []
        self._ctx: Any = None
        self.errors = 0

    async def start(self) -> None:
        import zmq
        import zmq.asyncio

        self._ctx = zmq.asyncio.Context()
        for i, ep in enumerate(self.endpoints):
            sock = self._ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.SUBSCRIBE, self.topic)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(ep)
            self._tasks.append(asyncio.create_task(self._run(i, sock), name=f"kv-events-{i}"))

    async def _run(self, instance: int, sock: Any) -> None:
        try:
            while True:
                parts = await sock.recv_multipart()
                if len(parts) != 3:
                    self.errors += 1
                    log.warning("instance %d: KV event message with %d parts", instance, len(parts))
                    continue
                _, seq_bytes, payload = parts
                seq = int.from_bytes(seq_bytes, "big", signed=True)
                try:
                    self.view.apply_message(instance, seq if seq >= 0 else None, payload)
                except (KVEventError, ValueError) as exc:
                    self.errors += 1
                    log.error("instance %d: bad KV event batch: %s", instance, exc)
        finally:
            sock.close(linger=0)

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
