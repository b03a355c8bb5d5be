"""The exact view's per-medium map (issue 29): KV events with `medium` CPU / DISK keep a block
map per tier, and `tier_hits` reads host after the HBM prefix and disk after that."""

from __future__ import annotations

import msgspec
import pytest

from agentic_kvc.cache.hashing import block_hashes, vllm_block_hashes, vllm_event_hash
from agentic_kvc.cache.kv_events import ExactCacheView
from agentic_kvc.cache.prefix_index import ExactPrefixIndex, medium_tier
from agentic_kvc.policy.base import RequestView, TierHits

BS = 16
PROMPT = list(range(5000, 5000 + 6 * BS))
ENGINE = [vllm_event_hash(h) for h in vllm_block_hashes(PROMPT, BS)]


def _stored(lo: int, hi: int, medium: str | None, tokens: bool = True) -> dict:
    parent = ENGINE[lo - 1] if lo else None
    return {
        "type": "BlockStored",
        "block_hashes": ENGINE[lo:hi],
        "parent_block_hash": parent,
        "token_ids": PROMPT[lo * BS : hi * BS] if tokens else [],
        "block_size": BS,
        "medium": medium,
    }


def _removed(lo: int, hi: int, medium: str | None) -> dict:
    return {"type": "BlockRemoved", "block_hashes": ENGINE[lo:hi], "medium": medium}


def _req(n_tokens: int = 6 * BS + 1) -> RequestView:
    return RequestView("q", "s", 0, n_tokens, 1, tuple(block_hashes(PROMPT, BS)), BS)


def test_offload_then_gpu_eviction_leaves_a_host_hit_after_the_hbm_prefix() -> None:
    ex = ExactPrefixIndex(2, BS)
    ex.apply(0, _stored(0, 6, "GPU"))
    # The offloading connector copies blocks 2..5 to CPU (no token ids: known by engine hash).
    ex.apply(0, _stored(2, 6, "CPU", tokens=False))
    assert ex.tier_hits(_req(), 2) == [TierHits(6 * BS, 0, 0), TierHits(0)]
    ex.apply(0, _removed(2, 6, "GPU"))  # HBM evicts them: the CPU copy remains
    assert ex.tier_hits(_req(), 2)[0] == TierHits(2 * BS, 4 * BS, 0)
    assert ex.matched_tokens(_req(), 2) == [2 * BS, 0]  # still HBM only
    # Blocks 4..5 also on disk, 4..5 dropped from CPU: host 2 blocks, then disk 2 blocks.
    ex.apply(0, _stored(4, 6, "DISK", tokens=False))
    ex.apply(0, _removed(4, 6, "cpu"))
    assert ex.tier_hits(_req(), 2)[0] == TierHits(2 * BS, 2 * BS, 2 * BS)
    assert (ex.blocks(0), ex.blocks(0, "host"), ex.blocks(0, "disk")) == (2, 2, 2)


def test_a_cpu_block_with_token_ids_is_keyed_from_a_parent_in_any_tier() -> None:
    ex = ExactPrefixIndex(1, BS)
    ex.apply(0, _stored(0, 3, "GPU"))
    ex.apply(0, _stored(3, 6, "CPU_PINNED"))  # parent block 2 is on the GPU
    assert ex.tier_hits(_req(), 1) == [TierHits(3 * BS, 3 * BS, 0)]
    ex.apply(0, _removed(0, 3, None))  # GPU blocks gone: the host run has no HBM head
    assert ex.tier_hits(_req(), 1) == [TierHits(0, 0, 0)]
    assert ex.unkeyed_blocks == 0


def test_clear_per_medium_and_unknown_medium() -> None:
    ex = ExactPrefixIndex(1, BS)
    ex.apply(0, _stored(0, 2, "GPU"))
    ex.apply(0, _stored(2, 6, "CPU"))
    ex.apply(0, {"type": "AllBlocksCleared", "medium": "CPU"})
    assert ex.tier_hits(_req(), 1) == [TierHits(2 * BS)]
    ex.apply(0, {"type": "AllBlocksCleared"})  # no medium: everything
    assert ex.tier_hits(_req(), 1) == [TierHits(0)]
    with pytest.raises(ValueError, match="medium 'NVME_OF'"):
        ex.apply(0, _stored(0, 1, "NVME_OF"))
    assert [medium_tier(m) for m in (None, "GPU", "cpu_pinned", "FS", "obj")] == [
        "hbm",
        "hbm",
        "host",
        "disk",
        "disk",
    ]


def test_exact_cache_view_caps_tier_hits_at_the_last_prompt_token() -> None:
    view = ExactCacheView(1, BS)
    batch = msgspec.msgpack.encode([0.0, [_stored(0, 2, "GPU"), _stored(2, 6, "CPU")]])
    view.apply_message(0, 0, batch)
    # A prompt of exactly 6 blocks: vLLM never serves the last token, so 5 blocks at most.
    assert view.tier_hits(_req(6 * BS), 1) == [TierHits(2 * BS, 3 * BS, 0)]
    assert view.tier_hits(_req(), 1) == [TierHits(2 * BS, 4 * BS, 0)]
    assert view.stats()["host_blocks"] == [4]
