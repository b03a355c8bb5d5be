"""The exact cache view: vLLM's event wire format, vLLM's lookup rule, the ZMQ subscriber,
and the proxy routing by it."""

from __future__ import annotations

import asyncio
import json
import time

import msgspec
import pytest
import zmq

from agentic_kvc.cache.hashing import block_hashes, vllm_block_hashes, vllm_event_hash
from agentic_kvc.cache.kv_events import ExactCacheView, KVEventError, KVEventSubscriber
from agentic_kvc.policy.base import RequestView
from agentic_kvc.serve.ports import free_port

BS = 16
kv_events = pytest.importorskip("vllm.distributed.kv_events")
_encode = msgspec.msgpack.Encoder().encode


def _stored(tokens: list[int], parent: int | None = None, parent_bytes: bytes | None = None):
    hashes = [vllm_event_hash(h) for h in vllm_block_hashes(tokens, BS, parent=parent_bytes)]
    return kv_events.BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=tokens,
        block_size=BS,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )


def _batch(*events: object) -> bytes:
    """Bytes exactly as vLLM's ZMQ publisher sends them (its own structs and encoder)."""
    return _encode(kv_events.KVEventBatch(ts=time.time(), events=list(events)))


def _req(tokens: list[int], rid: str = "r") -> RequestView:
    return RequestView(rid, None, 0, len(tokens), 4, block_hashes(tokens, BS), BS)


def test_vllm_encoded_batches_build_the_index_and_follow_removals() -> None:
    prompt = list(range(100, 100 + 5 * BS + 3))
    view = ExactCacheView(2, BS)
    assert view.apply_message(1, 0, _batch(_stored(prompt[: 5 * BS]))) == 1
    assert view.matched_tokens(_req(prompt), 2) == [0, 5 * BS]
    ev = _stored(prompt[: 5 * BS])
    view.apply_message(
        1, 1, _batch(kv_events.BlockRemoved(block_hashes=ev.block_hashes[3:], medium="GPU"))
    )
    assert view.matched_tokens(_req(prompt), 2) == [0, 3 * BS]
    view.apply_message(1, 2, _batch(kv_events.AllBlocksCleared()))
    assert view.matched_tokens(_req(prompt), 2) == [0, 0]
    assert view.stats()["lost_batches"] == 0


def test_child_events_continue_their_parent_chain() -> None:
    head, tail = list(range(7, 7 + 2 * BS)), list(range(900, 900 + 2 * BS))
    view = ExactCacheView(1, BS)
    first = _stored(head)
    view.apply_message(0, 0, _batch(first))
    parent_bytes = vllm_block_hashes(head, BS)[-1]
    child = _stored(tail, parent=first.block_hashes[-1], parent_bytes=parent_bytes)
    view.apply_message(0, 1, _batch(child))
    assert view.matched_tokens(_req([*head, *tail, 1]), 1) == [4 * BS]
    # A child whose parent was never seen cannot be keyed: under-report, never invent.
    orphan = _stored(list(range(50, 50 + BS)), parent=12345)
    view.apply_message(0, 3, _batch(orphan))
    assert view.stats()["unkeyed_blocks"] == 1 and view.stats()["lost_batches"] == 1


def test_prediction_follows_vllms_rule_last_token_never_cached() -> None:
    prompt = list(range(300, 300 + 4 * BS))  # exactly 4 blocks, all cached
    view = ExactCacheView(1, BS)
    view.apply_message(0, None, _batch(_stored(prompt)))
    # vLLM looks up at most num_tokens - 1 tokens, in whole blocks: 3 blocks, not 63 tokens.
    assert view.matched_tokens(_req(prompt), 1) == [3 * BS]
    assert view.matched_tokens(_req([*prompt, 5]), 1) == [4 * BS]


def test_block_size_is_adopted_from_the_engine_and_bad_input_is_named() -> None:
    view = ExactCacheView(1, 32)
    view.apply_message(0, 0, _batch(_stored(list(range(2 * BS)))))  # engine uses 16
    assert view.block_size == BS and view.blocks(0) == 2
    with pytest.raises(KVEventError, match="block size 64 differs"):
        view.set_block_size(64)
    with pytest.raises(KVEventError, match="instance 0: KV event batch is not msgpack"):
        view.apply_message(0, 1, b"\xc1")
    with pytest.raises(KVEventError, match=r"expected \[ts, \[events"):
        view.apply_message(0, 2, _encode({"ts": 1}))


def test_subscriber_follows_a_zmq_publisher() -> None:
    port = free_port()
    prompt = list(range(40, 40 + 3 * BS + 1))

    async def run() -> list[int]:
        ctx = zmq.Context()
        pub = ctx.socket(zmq.PUB)
        pub.bind(f"tcp://127.0.0.1:{port}")
        view = ExactCacheView(1, BS)
        sub = KVEventSubscriber(view, [f"tcp://127.0.0.1:{port}"])
        await sub.start()
        try:
            payload = _batch(_stored(prompt[: 3 * BS]))
            for seq in range(200):  # PUB drops messages until the SUB has joined
                pub.send_multipart([b"kv-events", seq.to_bytes(8, "big"), payload])
                await asyncio.sleep(0.01)
                if view.blocks(0):
                    break
            return view.matched_tokens(_req(prompt), 1)
        finally:
            await sub.stop()
            pub.close(0)
            ctx.term()

    assert asyncio.run(run()) == [3 * BS]


def test_proxy_with_exact_view_predicts_from_events(pd_fakes, tmp_path) -> None:
    from agentic_kvc.proxy.server import ProxyThread
    from agentic_kvc.proxy.settings import ProxySettings

    ports = [free_port(), free_port()]
    ctx = zmq.Context()
    pubs = [ctx.socket(zmq.PUB) for _ in ports]
    for pub, port in zip(pubs, ports, strict=True):
        pub.bind(f"tcp://127.0.0.1:{port}")
    settings = ProxySettings(
        engines=[s.url for _, s in pd_fakes],
        port=0,
        policy="adaptive",
        cache_view="exact",
        kv_events=[f"tcp://127.0.0.1:{p}" for p in ports],
        records=tmp_path / "records.jsonl",
    )
    prompt = list(range(2000, 2000 + 6 * BS + 5))
    try:
        with ProxyThread(settings) as proxy:
            view = proxy.app.state.cache
            payload = _batch(_stored(prompt[: 4 * BS]))
            for seq in range(300):
                pubs[1].send_multipart([b"kv-events", seq.to_bytes(8, "big"), payload])
                time.sleep(0.01)
                if view.blocks(1):
                    break
            import httpx

            r = httpx.post(
                f"{proxy.url}/v1/completions",
                json={"model": "m", "prompt": prompt, "max_tokens": 2},
                timeout=10,
            )
            assert r.status_code == 200, r.text
            # Instance 1 holds 4 blocks by its events; the cache/LB choice goes there.
            assert r.headers["x-akvc-decode"] == "1"
            assert r.headers["x-akvc-predicted-cached-tokens"] == str(4 * BS)
            assert view.blocks(0) == 0  # routing taught the exact view nothing
        rec = json.loads((tmp_path / "records.jsonl").read_text().splitlines()[0])
        assert rec["cache_view"] == "exact" and rec["predicted_cached_tokens"] == 4 * BS
    finally:
        for pub in pubs:
            pub.close(0)
        ctx.term()
