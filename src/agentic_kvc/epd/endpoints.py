"""The two sides wired to an encoder-cache transport: what an E and a PD scheduler and model
runner do per step.

Transport-agnostic; a real vLLM integration calls the same methods from its scheduler and
model-runner hooks, the integration tests from a plain loop.
"""

from __future__ import annotations

import queue
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from agentic_kvc.epd.cache_manager import Key
from agentic_kvc.epd.ec_transport import ECTransport, ECTransportError
from agentic_kvc.epd.encode_scheduler import EncodeScheduler
from agentic_kvc.epd.preallocator import Metadata, MMInput, PDEncoderCache


def toy_embedding(req_id: str, input_id: int, tokens: int, hidden: int) -> np.ndarray:
    """A deterministic stand-in embedding (same bytes in every process), for tests and demos."""
    rng = np.random.default_rng(zlib.crc32(f"{req_id}:{input_id}".encode()))
    return rng.standard_normal((tokens, hidden)).astype(np.float32)


class EncodeEndpoint:
    """E instance: schedule whole requests, announce each input, hand embeddings over."""

    def __init__(
        self,
        scheduler: EncodeScheduler,
        transport: ECTransport,
        encode: Callable[[str, int, int], np.ndarray],
    ) -> None:
        self.sched, self.conn, self.encode = scheduler, transport, encode
        self.route: dict[str, str] = {}  # request -> PD instance (chosen by the proxy)

    def add_request(self, req_id: str, sizes: Sequence[int], pd: str) -> None:
        self.route[req_id] = pd
        self.sched.add_request(req_id, sizes)

    def step(self) -> list[Key]:
        """One iteration: encode what fits, then free what was transferred or declined."""
        self.conn.check()
        for job in self.sched.schedule():
            pd = self.route[job.req_id]
            for i, size in enumerate(job.sizes):
                self.conn.send_metadata(pd, Metadata(job.req_id, i, size, self.conn.name))
            for i, size in enumerate(job.sizes):
                self.conn.add_encoder_cache(job.req_id, i, self.encode(job.req_id, i, size), pd)
        done = self.conn.take_transferred_ids()
        self.sched.release(done)
        return done


class PDEndpoint:
    """PD instance: preallocate for announced inputs, inject arriving data, free on finish.

    On a transport failure the reservations are freed (their data cannot come) and `step`
    raises the transport's error.
    """

    def __init__(self, cache: PDEncoderCache, transport_factory: Callable[..., ECTransport]):
        self.cache = cache
        self.injected: dict[Key, np.ndarray] = {}
        self._inbox: queue.Queue[tuple[str, int, np.ndarray]] = queue.Queue()
        self.conn = transport_factory(
            on_metadata=cache.prealloc.receive_metadata,
            on_cache=lambda r, i, a: self._inbox.put((r, i, a)),
        )

    def add_request(self, req_id: str, inputs: Sequence[MMInput], num_computed: int = 0) -> None:
        self.cache.add_request(req_id, inputs, num_computed)

    def step(self) -> None:
        if self.conn.error is not None:
            self.cache.drop_reservations()
            raise ECTransportError(str(self.conn.error))
        for notice in self.cache.perform_preallocations():
            self.conn.send_notice(notice)
        while True:
            try:
                req_id, input_id, arr = self._inbox.get_nowait()
            except queue.Empty:
                break
            if self.cache.on_injected(req_id, input_id):
                self.injected[(req_id, input_id)] = arr

    def finish_request(self, req_id: str) -> None:
        for notice in self.cache.finish_request(req_id):
            self.conn.send_notice(notice)
        for key in [k for k in self.injected if k[0] == req_id]:
            del self.injected[key]
