"""The vLLM plugin that frees a finished session's blocks to the free queue's head
(serve/vllm_release_first.py), on vLLM's own BlockPool; the whole path through a real engine is
tests/integration/test_real_vllm_finish_first.py."""

from __future__ import annotations

from importlib.metadata import entry_points
from types import SimpleNamespace

import pytest
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

from agentic_kvc.serve import vllm_release_first as rf


def _pool_with(n_held: int) -> tuple[BlockPool, list]:
    pool = BlockPool(num_gpu_blocks=12, enable_caching=True, hash_block_size=16)
    held = pool.get_new_blocks(n_held)
    for i, b in enumerate(held[:-1]):  # hashed but the last (a partial block never is)
        key = make_block_hash_with_group_id(bytes([i + 1]) * 32, 0)
        b.set_block_hash(key, 16)
        pool.cached_block_hash_to_block.insert(key, b)  # as cache_full_blocks does
    return pool, held


def _queue(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def test_plain_free_queues_hashed_blocks_last_and_release_first_queues_them_first() -> None:
    pool, held = _pool_with(4)
    others = _queue(pool)  # the never-used blocks (block 0 is vLLM's null block)
    pool.free_blocks(reversed(held))
    # vLLM: the unhashed tail block to the head, the hashed ones to the tail, tail first.
    assert _queue(pool) == [held[3].block_id, *others, *(b.block_id for b in held[2::-1])]

    pool, held = _pool_with(4)
    others = _queue(pool)
    rf.release_first(pool, reversed(held))
    assert _queue(pool) == [b.block_id for b in held[::-1]] + others
    # Still cached: a request with the same prefix would hit until an allocation takes them.
    assert all(pool.cached_block_hash_to_block.get_one_block(b.block_hash) is b for b in held[:3])
    # The next allocation takes exactly them, tail first, and evicts their hashes.
    taken = pool.get_new_blocks(2)
    assert [b.block_id for b in taken] == [held[3].block_id, held[2].block_id]
    assert held[2].block_hash is None and held[1].block_hash is not None


def test_a_block_another_request_holds_stays_out_of_the_queue() -> None:
    pool, held = _pool_with(3)
    pool.touch(held[:1])  # a second request shares the first block
    before = _queue(pool)
    rf.release_first(pool, reversed(held))
    assert _queue(pool) == [held[2].block_id, held[1].block_id, *before]
    assert held[0].ref_cnt == 1


def test_only_flagged_requests_are_released_first() -> None:
    def req(extra: dict | None) -> SimpleNamespace:
        return SimpleNamespace(sampling_params=SimpleNamespace(extra_args=extra))

    assert rf.wants_release_first(req({rf.XARG: 1}))
    assert not rf.wants_release_first(req({rf.XARG: 0}))
    assert not rf.wants_release_first(req(None))
    assert not rf.wants_release_first(SimpleNamespace(sampling_params=None))


def test_the_plugin_is_registered_and_patches_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eps = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert eps.get("akvc_release_first") == "agentic_kvc.serve.vllm_release_first:register"
    from vllm.v1.core.sched.scheduler import Scheduler

    calls: list[object] = []

    def plain(self: object, request: object) -> None:  # stands in for vLLM's own path
        calls.append("plain")

    monkeypatch.setattr(rf, "_patched", False)
    monkeypatch.setattr(Scheduler, "_free_request_blocks", plain)
    monkeypatch.delenv(rf.ENV, raising=False)
    rf.register()
    assert Scheduler._free_request_blocks is plain
    monkeypatch.setenv(rf.ENV, "1")
    rf.register()
    patched = Scheduler._free_request_blocks
    assert patched is not plain
    rf.register()  # vLLM may load plugins more than once per process
    assert Scheduler._free_request_blocks is patched

    # Flagged requests go to the head; others, and flagged ones whose blocks vLLM must free
    # later, through vLLM's own path.
    pool, held = _pool_with(3)
    others = _queue(pool)
    manager = SimpleNamespace(block_pool=pool, pop_blocks_for_free=lambda r: list(held))
    can_free = [True]
    sched = SimpleNamespace(
        kv_cache_manager=manager, _request_blocks_can_be_freed=lambda r: can_free[0]
    )
    flagged = SimpleNamespace(sampling_params=SimpleNamespace(extra_args={rf.XARG: 1}))
    unflagged = SimpleNamespace(sampling_params=SimpleNamespace(extra_args=None))
    patched(sched, unflagged)
    can_free[0] = False
    patched(sched, flagged)
    assert calls == ["plain", "plain"] and _queue(pool) == others
    can_free[0] = True
    patched(sched, flagged)
    assert calls == ["plain", "plain"]
    assert _queue(pool) == [b.block_id for b in held[::-1]] + others
