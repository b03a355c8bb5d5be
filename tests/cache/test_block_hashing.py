"""Router block hashing (fast, chained, incremental) and vLLM's block hash."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.cache import hashing
from agentic_kvc.cache.hashing import (
    SessionBlockHasher,
    block_hashes,
    vllm_block_hashes,
    vllm_event_hash,
    vllm_none_hash,
    workload_tokens,
)
from agentic_kvc.workload.model import Block


def reference(tokens: list[int], bs: int) -> list[int]:
    """The same rolling hash, one token at a time in plain Python."""
    z = np.zeros(len(tokens), dtype=np.uint64)
    hashing._mix_into(np.asarray(tokens, dtype=np.int64), z, np.zeros_like(z))
    p1, p2 = int(hashing._P[0]), int(hashing._P[1])
    b1, b2 = hashing._B
    bits = hashing._LANE_BITS
    out, h1, h2 = [], 0, 0
    for i, x in enumerate(z.tolist()):
        h1 = (h1 * b1 + (x >> (64 - bits)) + 1) % p1  # digits 1..2^28: token 0 counts
        h2 = (h2 * b2 + (x & ((1 << bits) - 1)) + 1) % p2
        if (i + 1) % bs == 0:
            out.append((h1 << 31) | h2)
    return out


@pytest.mark.parametrize("bs", [1, 7, 16, 32, 33, 64])
def test_vectorised_hash_matches_scalar_reference(bs: int) -> None:
    toks = np.random.default_rng(bs).integers(0, 200_000, 2_000).tolist()
    assert block_hashes(toks, bs) == reference(toks, bs)


@settings(max_examples=100, deadline=None)
@given(
    a=st.lists(st.integers(0, 2**31), max_size=80),
    b=st.lists(st.integers(0, 2**31), max_size=80),
    bs=st.integers(1, 8),
)
def test_keys_equal_exactly_on_shared_full_block_prefixes(a, b, bs) -> None:
    ha, hb = block_hashes(a, bs), block_hashes(b, bs)
    assert len(ha) == len(a) // bs
    for j in range(min(len(ha), len(hb))):
        same_prefix = a[: (j + 1) * bs] == b[: (j + 1) * bs]
        assert (ha[j] == hb[j]) == same_prefix


def test_input_types_agree() -> None:
    toks = list(range(100))
    want = block_hashes(toks)
    assert block_hashes(np.array(toks, dtype=np.int32)) == want
    assert block_hashes(np.array(toks, dtype=np.uint64)) == want
    assert block_hashes(tuple(toks)) == want
    with pytest.raises(ValueError, match="integer"):
        block_hashes(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="block_size"):
        block_hashes(toks, 0)


def test_session_hasher_reuses_the_shared_prefix() -> None:
    rng = np.random.default_rng(0)
    turn1 = rng.integers(0, 50_000, 10_000)
    turn2 = np.concatenate([turn1, rng.integers(0, 50_000, 3_000)])
    h = SessionBlockHasher(block_size=16)
    assert h.hash("s", turn1) == block_hashes(turn1)
    assert (h.reused_blocks, h.hashed_blocks) == (0, 625)
    assert h.hash("s", turn2) == block_hashes(turn2)
    assert h.reused_blocks == 625  # every full block of turn 1
    # An edit inside turn 1's prompt: reuse stops at the block holding the edit.
    turn3 = turn2.copy()
    turn3[5_000] += 1
    assert h.hash("s", turn3) == block_hashes(turn3)
    assert h.reused_blocks == 625 + 5_000 // 16
    # Other sessions are independent; the memo is bounded.
    small = SessionBlockHasher(max_sessions=2)
    for s in "abc":
        small.hash(s, turn1[:64])
    small.hash("a", turn1[:80])
    assert small.reused_blocks == 0  # "a" was evicted by "c"


def test_session_memo_keeps_within_its_byte_budget() -> None:
    # A 10k-token prompt's memo takes 95,000 bytes (tokens, two hash lanes and the key slots,
    # 8 bytes each); a 300,000-byte budget keeps the latest three sessions, and the keys never
    # depend on what is kept.
    rng = np.random.default_rng(1)
    prompts = {s: rng.integers(0, 50_000, 10_000) for s in "abcdefghij"}
    h = SessionBlockHasher(block_size=16, budget_bytes=300_000)
    for s, p in prompts.items():
        assert h.hash(s, p) == block_hashes(p)
    assert h.nbytes == 3 * (10_000 * 8 + 3 * 625 * 8)
    for s in "hija":  # the last three were kept: their next turns reuse every block
        longer = np.concatenate([prompts[s], [7] * 16])
        assert h.hash(s, longer) == block_hashes(longer)
    assert h.reused_blocks == 3 * 625  # not "a": dropped for the budget
    h.forget("j")
    assert h.nbytes == 2 * (10_016 * 8 + 3 * 626 * 8)  # "i" and "a" ("h" made room for "a")


def test_workload_tokens_share_exactly_the_shared_blocks() -> None:
    sys_prompt, turn_a, turn_b = Block(1, 40), Block(2, 30), Block(3, 30)
    a = workload_tokens([sys_prompt, turn_a])
    b = workload_tokens([sys_prompt, turn_b])
    assert len(a) == 70
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert ha[:2] == hb[:2]  # tokens 0..31 come from block 1 in both
    assert ha[2] != hb[2]  # tokens 32..47 mix in blocks 2 vs 3
    assert len(workload_tokens([])) == 0


def test_vllm_hash_recipe_is_chained_and_seeded() -> None:
    toks = list(range(48))
    hs = vllm_block_hashes(toks, 16)
    assert len(hs) == 3 and all(len(h) == 32 for h in hs)
    assert vllm_block_hashes(toks[16:], 16, parent=hs[0]) == hs[1:]
    assert vllm_block_hashes(toks, 16, none_hash_seed="other") != hs
    assert vllm_block_hashes(toks, 16, algo="sha256_cbor") != hs
    as_int = vllm_event_hash(hs[0])
    assert isinstance(as_int, int) and 0 <= as_int < 2**64
    assert as_int == int.from_bytes(hs[0][-8:], "big")
    with pytest.raises(ValueError, match="unsupported"):
        vllm_none_hash("md5")  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
def test_vllm_hash_matches_the_installed_engine(algo: str, monkeypatch) -> None:
    """Cross-check against vLLM's own functions (imports vLLM: ~20 s)."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    kv = pytest.importorskip("vllm.v1.core.kv_cache_utils")
    vh = pytest.importorskip("vllm.utils.hashing")
    fn = vh.get_hash_fn_by_name(algo)
    kv.init_none_hash(fn)
    toks = list(range(1000, 1050))
    parent, want = None, []
    for j in range(len(toks) // 16):
        parent = kv.hash_block_tokens(fn, parent, toks[j * 16 : (j + 1) * 16], None)
        want.append(parent)
    assert vllm_block_hashes(toks, 16, algo=algo) == want
    assert vllm_event_hash(want[0]) == int.from_bytes(want[0], "big") & (2**64 - 1)
