"""The vLLM plugin that makes a new request's cached prefix the most recent free KV
(serve/vllm_refresh_on_arrival.py), on vLLM's own KVCacheManager driven as its scheduler drives
it; the whole path through a real engine is tests/integration/test_real_vllm_refresh.py."""

from __future__ import annotations

from importlib.metadata import entry_points
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request

from agentic_kvc.serve import vllm_refresh_on_arrival as roa

BS = 16


def _manager(blocks: int) -> KVCacheManager:
    init_none_hash(sha256)
    spec = FullAttentionSpec(block_size=BS, num_kv_heads=1, head_size=8, dtype=torch.float32)
    config = KVCacheConfig(
        num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)]
    )
    return KVCacheManager(config, max_model_len=4096, scheduler_block_size=BS, hash_block_size=BS)


HASHER = get_request_block_hasher(BS, sha256)


def _request(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, SamplingParams(max_tokens=1), None, block_hasher=HASHER)


def _serve(m: KVCacheManager, r: Request, free: bool = True) -> int:
    """Schedule `r` as vLLM does (hit, then allocate the rest), finish it; its hit in tokens."""
    hit, n, *_ = m.get_computed_blocks(r)
    assert m.allocate_slots(r, r.num_tokens - n, n, hit) is not None
    r.num_computed_tokens = r.num_tokens
    if free:
        m.free(r)
    return n


def _scenario(refresh: bool) -> tuple[KVCacheManager, int]:
    """16 usable blocks. A (3 full blocks and a token) ends, then D (5 full blocks and a token);
    A's next turn (A's 48 tokens and 16 more) arrives, and before it is scheduled C needs 10
    blocks. vLLM's free queue: the two partial blocks at its head, the 6 never-used ones, then
    A's 3 hashed blocks (the oldest, tail first) and D's 5: C takes 2 of A's and A's turn finds
    1 block. Refreshed at its arrival, A's blocks queue behind D's, C takes 2 of D's, and A's
    turn finds all 3."""
    m = _manager(17)  # block 0 is vLLM's null block
    a0 = list(range(1, 3 * BS + 2))
    assert _serve(m, _request("a0", a0)) == 0
    assert _serve(m, _request("d", list(range(1000, 1000 + 5 * BS + 1)))) == 0
    a1 = _request("a1", a0[:-1] + list(range(500, 500 + BS)))
    if refresh:
        assert roa.refresh_hit(m, a1) == 3
    _serve(m, _request("c", list(range(2000, 2000 + 9 * BS + 1))), free=False)
    return m, _serve(m, a1)


@pytest.mark.parametrize("refresh", [False, True])
def test_a_refreshed_prefix_outlives_older_free_blocks(refresh: bool) -> None:
    _m, hit = _scenario(refresh)
    assert hit == (3 if refresh else 1) * BS


def test_blocks_in_use_and_misses_are_left_alone() -> None:
    m = _manager(9)
    a = _request("a", list(range(1, 2 * BS + 2)))
    _serve(m, a, free=False)  # A still runs: its blocks are in use
    queue = [b.block_id for b in m.block_pool.free_block_queue.get_all_free_blocks()]
    again = _request("a-again", list(range(1, 2 * BS + 2)))
    assert roa.refresh_hit(m, again) == 0  # its hit is A's blocks, held
    assert roa.refresh_hit(m, _request("x", list(range(900, 900 + 2 * BS)))) == 0
    assert [b.block_id for b in m.block_pool.free_block_queue.get_all_free_blocks()] == queue


def test_the_plugin_is_registered_and_patches_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eps = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert (
        eps.get("akvc_refresh_on_arrival") == "agentic_kvc.serve.vllm_refresh_on_arrival:register"
    )
    from vllm.v1.core.sched.scheduler import Scheduler

    added: list[str] = []

    def plain(self: Any, request: Any) -> None:  # stands in for vLLM's own add_request
        added.append(request.request_id)
        self.requests[request.request_id] = request

    monkeypatch.setattr(roa, "_patched", False)
    monkeypatch.setattr(Scheduler, "add_request", plain)
    monkeypatch.delenv(roa.ENV, raising=False)
    roa.register()
    assert Scheduler.add_request is plain
    monkeypatch.setenv(roa.ENV, "1")
    roa.register()
    patched = Scheduler.add_request
    assert patched is not plain
    roa.register()  # vLLM may load plugins more than once per process
    assert Scheduler.add_request is patched

    m = _manager(17)
    a0 = list(range(1, 3 * BS + 2))
    _serve(m, _request("a0", a0))
    _serve(m, _request("d", list(range(1000, 1000 + 5 * BS + 1))))
    sched = SimpleNamespace(requests={}, kv_cache_manager=m)
    a1 = _request("a1", a0[:-1] + list(range(500, 500 + BS)))
    before = [b.block_id for b in m.block_pool.free_block_queue.get_all_free_blocks()]
    patched(sched, a1)
    after = [b.block_id for b in m.block_pool.free_block_queue.get_all_free_blocks()]
    assert added == ["a1"] and sorted(after) == sorted(before) and after != before
    hit, _n, *_ = m.get_computed_blocks(a1)
    # A's three blocks now end the queue, its head block last.
    assert after[-3:] == [b.block_id for b in hit.blocks[0][::-1]]
    # A request id vLLM already knows (a streamed input's next chunk) is not looked up again.
    patched(sched, a1)
    assert [b.block_id for b in m.block_pool.free_block_queue.get_all_free_blocks()] == after


def test_a_vllm_without_the_hooks_is_refused_with_a_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agentic_kvc.serve.vllm_internals import v1_scheduler

    assert v1_scheduler(roa.ENV, ("add_request",), ("prefix_cache_lookup_enabled",)) is not None
    assert v1_scheduler(roa.ENV, ("no_such_method",), ("nor_this",)) is None
    assert "Scheduler.no_such_method, KVCacheManager.nor_this" in caplog.text
    assert roa.ENV in caplog.text
