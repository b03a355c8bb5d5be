"""The exact index from vLLM KV events: stored blocks are re-keyed with the router's hash by
continuing their parent's key, removals and clears are applied, nothing is invented."""

from __future__ import annotations

import numpy as np
import pytest

from agentic_kvc.cache.hashing import block_hashes, vllm_block_hashes, vllm_event_hash
from agentic_kvc.cache.prefix_index import ExactPrefixIndex
from agentic_kvc.policy.base import RequestView

BS = 16


def _stored(tokens: list[int], parent: bytes | None, medium: str | None = "GPU") -> dict:
    """A BlockStored event as vLLM publishes it: engine hashes (low 64 bits), token ids."""
    hashes = vllm_block_hashes(tokens, BS, parent=parent)
    return {
        "type": "BlockStored",
        "block_hashes": [vllm_event_hash(h) for h in hashes],
        "parent_block_hash": vllm_event_hash(parent) if parent else None,
        "token_ids": tokens,
        "block_size": BS,
        "medium": medium,
    }


def _removed(hashes: list[int], medium: str | None = "GPU") -> dict:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def _request(tokens: list[int]) -> RequestView:
    return RequestView("q", "s", 0, len(tokens), 1, tuple(block_hashes(tokens, BS)), BS)


def test_stored_in_two_events_matches_the_prompt() -> None:
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 50_000, 10 * BS + 3).tolist()
    ex = ExactPrefixIndex(3, BS)
    first = vllm_block_hashes(prompt[: 4 * BS], BS)
    ex.apply(1, _stored(prompt[: 4 * BS], None))
    ex.apply(1, _stored(prompt[4 * BS : 10 * BS], first[-1]))  # continues block 3
    ex.apply(2, _stored(prompt[: 2 * BS], None))
    assert ex.matched_tokens(_request(prompt), 3) == [0, 10 * BS, 2 * BS]
    other = prompt[: 3 * BS] + rng.integers(0, 50_000, 5 * BS).tolist()  # shares 3 blocks
    assert ex.matched_tokens(_request(other), 3) == [0, 3 * BS, 2 * BS]


def test_removed_cleared_and_offloaded_blocks() -> None:
    prompt = list(range(1000, 1000 + 6 * BS))
    ex = ExactPrefixIndex(2, BS)
    ev = _stored(prompt, None)
    ex.apply(0, ev)
    ex.apply(0, _removed(ev["block_hashes"][4:]))
    assert ex.matched_tokens(_request(prompt), 2) == [4 * BS, 0]
    # A CPU copy is not a GPU prefix hit; a CPU removal leaves the GPU view alone.
    ex.apply(1, _stored(prompt, None, medium="CPU"))
    ex.apply(0, _removed(ev["block_hashes"], medium="CPU"))
    assert ex.matched_tokens(_request(prompt), 2) == [4 * BS, 0]
    # Removing a head block ends the match there, as vLLM's lookup would.
    ex.apply(0, _removed(ev["block_hashes"][1:2], medium=None))
    assert ex.matched_tokens(_request(prompt), 2) == [BS, 0]
    ex.apply(0, {"type": "AllBlocksCleared"})
    assert ex.matched_tokens(_request(prompt), 2) == [0, 0] and ex.blocks(0) == 0
    assert ex.events == 6


def test_unknown_parent_is_counted_not_guessed() -> None:
    prompt = list(range(8 * BS))
    head = vllm_block_hashes(prompt[: 4 * BS], BS)
    ex = ExactPrefixIndex(1, BS)
    ex.apply(0, _stored(prompt[4 * BS :], head[-1]))  # the head's event was never seen
    assert ex.unkeyed_blocks == 4 and ex.blocks(0) == 0
    assert ex.matched_tokens(_request(prompt), 1) == [0]


def test_bad_events_are_errors_that_say_why() -> None:
    ex = ExactPrefixIndex(1, BS)
    with pytest.raises(ValueError, match="block_size 32 differs from the router's 16"):
        ex.apply(0, _stored(list(range(32)), None) | {"block_size": 32})
    with pytest.raises(ValueError, match="20 token ids for 2 blocks of 16"):
        ex.apply(0, _stored(list(range(32)), None) | {"token_ids": list(range(20))})
    with pytest.raises(ValueError, match="unknown KV event type 'BlockMoved'"):
        ex.apply(0, {"type": "BlockMoved"})


def test_accepts_vllm_event_objects() -> None:
    kv_events = pytest.importorskip("vllm.distributed.kv_events")
    prompt = list(range(500, 500 + 3 * BS))
    ev = _stored(prompt, None)
    obj = kv_events.BlockStored(
        block_hashes=ev["block_hashes"],
        parent_block_hash=None,
        token_ids=prompt,
        block_size=BS,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )
    ex = ExactPrefixIndex(1, BS)
    ex.apply(0, obj)
    assert ex.matched_tokens(_request(prompt), 1) == [3 * BS]
    ex.apply(0, kv_events.BlockRemoved(block_hashes=ev["block_hashes"][2:], medium="GPU"))
    assert ex.matched_tokens(_request(prompt), 1) == [2 * BS]
