"""The Redis encoder-cache transport, real redis-server: E in a child process, PD in this one."""

from __future__ import annotations

import multiprocessing as mp
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from agentic_kvc.epd.ec_transport import ECTransportError, RedisECTransport
from agentic_kvc.epd.encode_scheduler import EncodeScheduler
from agentic_kvc.epd.endpoints import EncodeEndpoint, PDEndpoint, toy_embedding
from agentic_kvc.epd.preallocator import Metadata, MMInput, PDEncoderCache
from agentic_kvc.serve.services import RedisServer, redis_available

pytestmark = pytest.mark.skipif(redis_available() is None, reason="redis-server not installed")
HIDDEN = 8
# request -> encoder tokens per image; b's first image is covered by PD's prefix cache.
REQUESTS = {"a": [16], "b": [16, 12], "c": [24]}
SPANS = {r: [MMInput(10 + 40 * i, n) for i, n in enumerate(s)] for r, s in REQUESTS.items()}


def _encode_instance(url: str, name: str, reqs: dict, result, stop) -> None:  # type: ignore[no-untyped-def]
    conn = RedisECTransport(name, url).start()
    ep = EncodeEndpoint(
        EncodeScheduler(capacity=64, budget=64),
        conn,
        lambda r, i, n: toy_embedding(r, i, n, HIDDEN),
    )
    for req, sizes in reqs.items():
        ep.add_request(req, sizes, pd="pd0")
    while not stop.is_set():
        ep.step()
        time.sleep(0.01)
    ep.step()
    conn.close()
    result.put({"sent": sorted(conn.sent_ids), "free": ep.sched.manager.num_free})


def _wait(cond, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError("condition not met in time")
        time.sleep(0.02)


def test_metadata_notice_and_data_flow_then_redis_restart(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path).start()
    ctx = mp.get_context("fork")  # before any transport thread exists in this process
    result, stop = ctx.Queue(), ctx.Event()
    try:
        pd = PDEndpoint(
            PDEncoderCache(capacity=40),  # < total announced (68): preallocation must queue
            partial(RedisECTransport, "pd0", redis.url),
        )
        for req, spans in SPANS.items():
            pd.add_request(req, spans, num_computed=30 if req == "b" else 0)
        e = ctx.Process(target=_encode_instance, args=(redis.url, "e0", REQUESTS, result, stop))
        pd.conn.start()
        e.start()
        needed = [("a", 0), ("b", 1), ("c", 0)]

        def consume() -> bool:  # the PD "computes" injected inputs so space frees for c
            pd.step()
            for req, i in list(pd.injected):
                pd.cache.on_tokens_computed(req, SPANS[req][i].offset + SPANS[req][i].length)
            return all(k in pd.injected for k in needed)

        _wait(consume)
        assert sorted(pd.injected) == needed
        for req, i in needed:
            np.testing.assert_array_equal(
                pd.injected[(req, i)], toy_embedding(req, i, REQUESTS[req][i], HIDDEN)
            )
        stop.set()
        out = result.get(timeout=20)
        e.join(timeout=10)
        # Only the needed inputs were sent; b's first (prefix-covered, declined) was not.
        assert sorted(tuple(k) for k in out["sent"]) == needed
        assert out["free"] == 64  # E freed everything once transferred or declined
        for req in REQUESTS:
            pd.finish_request(req)
        assert pd.cache.manager.num_free == 40

        # A reservation whose data never comes, then Redis goes away mid-flight.
        sender = RedisECTransport("e9", redis.url).start()
        pd.add_request("d", [MMInput(0, 20)])
        sender.send_metadata("pd0", Metadata("d", 0, 20, "e9"))
        _wait(lambda: (pd.step(), pd.cache.manager.num_free == 20)[1])
        sender.close()
        redis.stop()
        with pytest.raises(
            ECTransportError, match=r"Redis at redis://127\.0\.0\.1:\d+ unreachable"
        ):
            _wait(lambda: (pd.step(), False)[1], timeout_s=15)
        assert pd.cache.manager.num_free == 40  # the reservation was freed
        pd.conn.close()

        redis.start()  # same port: a fresh transport works again
        pd2 = PDEndpoint(PDEncoderCache(capacity=40), partial(RedisECTransport, "pd0", redis.url))
        pd2.conn.start()
        pd2.add_request("f", [MMInput(0, 8)])
        s2 = RedisECTransport("e9", redis.url).start()
        s2.send_metadata("pd0", Metadata("f", 0, 8, "e9"))
        _wait(lambda: (pd2.step(), pd2.cache.manager.num_free == 32)[1])
        s2.close()
        pd2.conn.close()
    finally:
        stop.set()
        redis.stop()
