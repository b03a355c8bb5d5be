"""Block hashing: the router's fast chained hash, and vLLM v1's own block hash.

Two hashes live here, for two different jobs.

*Router hash* (`block_hashes`, `SessionBlockHasher`). The router needs one key per full block
of `block_size` tokens such that two prompts share the key of block j exactly when they share
their first (j+1)*block_size tokens. Any chained hash has that property; vLLM's own (sha256 of
a pickled tuple per block) costs ~2 us a block in Python, so a 100k-token prompt would take
~15 ms. Instead the key of block j is a polynomial rolling hash of the whole prefix up to the
end of block j, computed for all blocks at once with numpy:

    H(t) = sum_{i<t} a_i * B^(t-1-i)  (mod p),  two lanes with p = 2^31-1 and 2^31-19

where a_i is a 28-bit slice of token i after a cheap 64-bit bijection (each lane takes a
different slice). Each lane is a prefix-sum of `a_i * B^-i`, re-scaled by `B^(t-1)`, so the
whole prompt is a handful of vector operations with one modulo per block, not per token.
The key is `(H1 << 31) | H2` (62 bits). Two different prefixes of the same length collide
with probability about (L/p)^2 for L tokens, and two distinct token ids look alike with
probability 2^-56: harmless for a routing estimate. Because H(t) extends H(k) as
`H(k) * B^(t-k) + tail`, a session's next turn only hashes the tokens after the full blocks
it shares with the previous turn.

*vLLM block hash* (`vllm_block_hashes`, `vllm_event_hash`). The exact cache view is fed by
vLLM KV events (BlockStored / BlockRemoved), whose block hashes are vLLM's. vLLM v1
(`vllm/v1/core/kv_cache_utils.py`, `hash_block_tokens`) hashes each full block as
`hash_fn((parent_hash, tuple(token_ids), extra_keys))`, where the parent of the first block is
`NONE_HASH = hash_fn(seed)` with seed `PYTHONHASHSEED` if set, else "vllm-none-hash" for the
cryptographic algorithms. `sha256` pickles the tuple (highest protocol), `sha256_cbor`
CBOR-encodes it canonically. KV events publish each hash as bytes or, by default
(`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`), as the low 64 bits of its big-endian integer.
This module re-implements that recipe so the exact view can relate event hashes to token ids.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import mul
from typing import Any, Literal

import numpy as np

from agentic_kvc.workload.model import Block

_P = (np.uint64(2147483647), np.uint64(2147483629))  # 2^31 - 1 and 2^31 - 19, both prime
_B = (1_000_003, 917_293_543)  # bases, any value in [2, p) works
_LANE_BITS = 28  # bits of the mixed token fed to each lane
_MAX_UNREDUCED = 32  # block sizes up to this sum per-token products without a modulo
_B_INV = tuple(pow(b, int(p) - 2, int(p)) for b, p in zip(_B, _P, strict=True))


class _Powers:
    """`base^0 .. base^(n-1) mod p`, grown on demand by doubling (kept between calls)."""

    def __init__(self, base: int, p: np.uint64) -> None:
        self.base, self.p = base, p
        self.table = np.ones(1, dtype=np.uint64)

    def upto(self, n: int) -> np.ndarray:
        while len(self.table) < n:
            m = len(self.table)
            step = np.uint64(pow(self.base, m, int(self.p)))
            self.table = np.concatenate([self.table, (self.table * step) % self.p])
        return self.table[:n]


_POW = tuple(_Powers(b, p) for b, p in zip(_B, _P, strict=True))
_POW_INV = tuple(_Powers(b, p) for b, p in zip(_B_INV, _P, strict=True))


class _Scratch(threading.local):
    """Two reusable uint64 work buffers per thread.

    Allocating fresh ~1 MB temporaries costs more than the arithmetic here (each new mapping
    is page-faulted in; measured ~0.7 ms per temporary for a 100k-token prompt in a
    sandboxed VM), so every per-token operation writes into these buffers in place.
    """

    def __init__(self) -> None:
        self.a = np.zeros(0, dtype=np.uint64)
        self.b = np.zeros(0, dtype=np.uint64)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.a) < n:
            size = max(n, 2 * len(self.a))
            self.a = np.empty(size, dtype=np.uint64)
            self.b = np.empty(size, dtype=np.uint64)
        return self.a[:n], self.b[:n]


_SCRATCH = _Scratch()
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xBF58476D1CE4E5B9)


def _mix_into(tokens: np.ndarray, z: np.ndarray, tmp: np.ndarray) -> None:
    """z = a cheap bijection on 64 bits of `tokens` (odd multiply, xor-shift, odd multiply).

    It spreads small token ids and the structured stand-in ids of `workload_tokens` over all
    64 bits, so the two 28-bit lanes taken from it look independent; being bijective, it never
    merges two distinct token ids by itself.
    """
    np.copyto(z, tokens, casting="unsafe")  # negative ids wrap: still distinct
    np.multiply(z, _K1, out=z)
    np.right_shift(z, np.uint64(29), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, _K2, out=z)


def as_token_array(tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """Token ids as a 1-d integer array (a numpy array passes through without a copy)."""
    if isinstance(tokens, np.ndarray):
        arr = tokens
    else:
        arr = np.fromiter(tokens, dtype=np.int64, count=len(tokens))
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"token ids must be a 1-d integer sequence, got {arr.dtype} {arr.shape}")
    return arr


def _lane_states(
    tokens: np.ndarray, block_size: int, start: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Rolling-hash state after each full block of `tokens`, continuing from state `start`."""
    nb = len(tokens) // block_size
    n = nb * block_size
    if nb == 0:
        empty = np.zeros(0, dtype=np.uint64)
        return empty, empty
    z, tmp = _SCRATCH.get(n)
    _mix_into(tokens[:n], z, tmp)
    ends = np.arange(block_size, n + 1, block_size)  # token counts at block boundaries
    out = []
    for lane in range(2):
        p = _P[lane]
        if lane == 0:
            np.right_shift(z, np.uint64(64 - _LANE_BITS), out=tmp)
        else:
            np.bitwise_and(z, np.uint64((1 << _LANE_BITS) - 1), out=tmp)
        # Digits 1..2^28, never 0: a zero digit adds nothing to the polynomial, so a leading
        # run of token 0 (which the mix maps to 0) would hash as if absent and a block of
        # them would get key 0, the chain's start.
        np.add(tmp, np.uint64(1), out=tmp)
        # sum_{i<t} a_i B^(t-1-i) = B^(t-1) * sum_{i<t} a_i B^-i. With a_i <= 2^28 and
        # B^-i < 2^31 a product is < 2^59, so up to 32 of them sum without overflow: reduce
        # once per block instead of once per token (uint64 division is the slow part).
        np.multiply(tmp, _POW_INV[lane].upto(n), out=tmp)
        if block_size > _MAX_UNREDUCED:
            np.remainder(tmp, p, out=tmp)
        s = np.cumsum(tmp.reshape(nb, block_size).sum(axis=1) % p) % p
        pw = _POW[lane].upto(n + 1)
        h = (s * pw[ends - 1]) % p
        if start[lane]:
            h = (h + (np.uint64(start[lane]) * pw[ends]) % p) % p
        out.append(h)
    return out[0], out[1]


def _keys(h1: np.ndarray, h2: np.ndarray) -> list[int]:
    return ((h1 << np.uint64(31)) | h2).tolist()


def block_hashes(tokens: Sequence[int] | np.ndarray, block_size: int = 16) -> list[int]:
    """Router keys of the full blocks of `tokens` (a trailing partial block gets none)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    h1, h2 = _lane_states(as_token_array(tokens), block_size, (0, 0))
    return _keys(h1, h2)


# The router hash's constants as Python ints, for the scalar path below.
_M64 = (1 << 64) - 1
_I64 = 1 << 63
_K1_INT, _K2_INT = int(_K1), int(_K2)
_P1, _P2 = int(_P[0]), int(_P[1])
_B1, _B2 = _B
_HIGH = 64 - _LANE_BITS
_LOW = (1 << _LANE_BITS) - 1

# Up to this many tokens the scalar path is the faster one in the proxy: hot in a loop, the
# numpy path (`SessionBlockHasher.hash`) costs 23-28 us whatever the length up to ~128
# tokens, the scalar one ~0.2 us a token once its digits are known (docs/proxy.md).
SCALAR_MAX_TOKENS = 64

# Each token id's two lane digits, for the scalar path: computing them (two 64-bit multiplies
# and a shift in Python ints) was half its time, and a short prompt's ids come from a
# vocabulary, so they repeat. Only validated int64 ids enter; cleared when full.
_DIGIT1: dict[int, int] = {}
_DIGIT2: dict[int, int] = {}
_DIGITS_MAX = 1 << 14  # about 3 MB when full (random ids of a 300k vocabulary)


def _learn_digits(tokens: Sequence[int]) -> bool:
    """Enter the digits of `tokens` missing from the table; False if one is not in int64."""
    if len(_DIGIT1) + len(tokens) > _DIGITS_MAX:
        _DIGIT1.clear()
        _DIGIT2.clear()
    for t in tokens:
        if t in _DIGIT1:
            continue
        if not -_I64 <= t < _I64:
            return False
        # _mix_into: int64 -> uint64 (negatives wrap), odd multiply, xor-shift, odd multiply;
        # each lane takes a 28-bit slice, + 1 (see _lane_states).
        z = (t & _M64) * _K1_INT & _M64
        z = (z ^ (z >> 29)) * _K2_INT & _M64
        _DIGIT1[t] = (z >> _HIGH) + 1
        _DIGIT2[t] = (z & _LOW) + 1
    return True


@functools.cache
def _block_weights(block_size: int) -> tuple[list[int], list[int], int, int]:
    """Each position's lane weights B^(bs-1-j) and the block's shift B^bs, per lane."""
    return (
        [pow(_B1, block_size - 1 - j, _P1) for j in range(block_size)],
        [pow(_B2, block_size - 1 - j, _P2) for j in range(block_size)],
        pow(_B1, block_size, _P1),
        pow(_B2, block_size, _P2),
    )


def scalar_block_hashes(tokens: Sequence[int], block_size: int) -> list[int] | None:
    """`block_hashes(tokens, block_size)` in plain Python (the same keys), or None
    when an element is not an int in int64 range (the numpy path then raises its error).

    Block by block, Horner's rule over a whole block is `h * B^bs + sum_j d_j * B^(bs-1-j)`:
    one weighted sum (in C) and one modulo per block and lane instead of one per token."""
    n = len(tokens) // block_size * block_size
    head = tokens[:n]
    if not head:
        return []
    if set(map(type, head)) != {int}:  # bool and float are hashable like ints: refuse them
        return None
    try:
        d1 = list(map(_DIGIT1.__getitem__, head))
        d2 = list(map(_DIGIT2.__getitem__, head))
    except KeyError:
        if not _learn_digits(head):
            return None
        d1 = list(map(_DIGIT1.__getitem__, head))
        d2 = list(map(_DIGIT2.__getitem__, head))
    w1, w2, shift1, shift2 = _block_weights(block_size)
    keys: list[int] = []
    h1 = h2 = 0
    for start in range(0, n, block_size):
        end = start + block_size
        h1 = (h1 * shift1 + sum(map(mul, d1[start:end], w1))) % _P1
        h2 = (h2 * shift2 + sum(map(mul, d2[start:end], w2))) % _P2
        keys.append(h1 << 31 | h2)
    return keys


def extend_block_hashes(
    parent: int | None, tokens: Sequence[int] | np.ndarray, block_size: int
) -> list[int]:
    """Router keys of the full blocks of `tokens` that follow a block whose key is `parent`
    (None: the prompt's start).

    A key is the rolling-hash state itself (`(H1 << 31) | H2`), so the chain continues from it:
    `block_hashes(a + b) == block_hashes(a) + extend_block_hashes(block_hashes(a)[-1], b, bs)`
    whenever len(a) is a multiple of `block_size`. The exact cache view uses this to key the
    blocks of a vLLM BlockStored event (which carries its parent and its token ids) with the
    router's own hash, so it never needs vLLM's hash recipe.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    start = (0, 0) if parent is None else (parent >> 31, parent & ((1 << 31) - 1))
    h1, h2 = _lane_states(as_token_array(tokens), block_size, start)
    return _keys(h1, h2)


def workload_tokens(blocks: Iterable[Block]) -> np.ndarray:
    """Stand-in token identities for a workload prompt without synthesising real token ids.

    Token k of workload block B is the same wherever B appears (see `workload.model`), so
    `(B.id << 32) | k` identifies it. Hashing these gives the same sharing structure as
    hashing the real tokens: use one or the other consistently within a run.
    """
    blocks = list(blocks)
    if not blocks:
        return np.zeros(0, dtype=np.uint64)
    sizes = np.fromiter((b.tokens for b in blocks), dtype=np.int64, count=len(blocks))
    ids = np.fromiter((b.id for b in blocks), dtype=np.uint64, count=len(blocks))
    if (sizes < 0).any():
        raise ValueError("workload block with a negative token count")
    total = int(sizes.sum())
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    offsets = (np.arange(total, dtype=np.int64) - starts).astype(np.uint64)
    return (np.repeat(ids, sizes) << np.uint64(32)) | offsets


@dataclass(slots=True)
class _Memo:
    tokens: np.ndarray
    h1: np.ndarray
    h2: np.ndarray
    keys: list[int]

    @property
    def nbytes(self) -> int:
        # The arrays and the key list's slots (the key ints are shared with the router's index).
        return self.tokens.nbytes + self.h1.nbytes + self.h2.nbytes + 8 * len(self.keys)


class SessionBlockHasher:
    """Router block hashing with a small per-session memo.

    An agentic session's turn n+1 usually starts with turn n's whole prompt (plus the reply and
    the tool output). `hash(session, tokens)` finds the leading full blocks shared with the
    session's previous prompt, reuses their keys, and hashes only the rest. The memo keeps the
    `max_sessions` most recently used sessions, and at most `budget_bytes` of their prompts'
    arrays (None: no bound): a 100k-token prompt takes about 1 MB, so 4,096 long sessions
    would otherwise hold gigabytes.
    """

    def __init__(
        self, block_size: int = 16, max_sessions: int = 4096, budget_bytes: int | None = None
    ) -> None:
        if block_size < 1 or max_sessions < 1:
            raise ValueError("block_size and max_sessions must be >= 1")
        self.block_size = block_size
        self.max_sessions = max_sessions
        self.budget_bytes = budget_bytes
        self.nbytes = 0
        self._memo: OrderedDict[str, _Memo] = OrderedDict()
        self.reused_blocks = 0  # counters for benchmarks and tests
        self.hashed_blocks = 0

    def hash(self, session_id: str | None, tokens: Sequence[int] | np.ndarray) -> list[int]:
        arr = as_token_array(tokens)
        bs = self.block_size
        prev = self._memo.get(session_id) if session_id is not None else None
        k = 0
        if prev is not None:
            n = min(len(prev.tokens), len(arr), len(prev.keys) * bs)
            diff = np.flatnonzero(prev.tokens[:n] != arr[:n])
            k = (int(diff[0]) if len(diff) else n) // bs
        if k:
            assert prev is not None
            start = (int(prev.h1[k - 1]), int(prev.h2[k - 1]))
            t1, t2 = _lane_states(arr[k * bs :], bs, start)
            h1 = np.concatenate([prev.h1[:k], t1])
            h2 = np.concatenate([prev.h2[:k], t2])
            keys = prev.keys[:k] + _keys(t1, t2)
        else:
            h1, h2 = _lane_states(arr, bs, (0, 0))
            keys = _keys(h1, h2)
        self.reused_blocks += k
        self.hashed_blocks += len(keys) - k
        if session_id is not None:
            memo = self._memo
            entry = _Memo(arr, h1, h2, keys)
            if prev is not None:
                self.nbytes -= prev.nbytes
            memo[session_id] = entry
            memo.move_to_end(session_id)
            self.nbytes += entry.nbytes
            budget = self.budget_bytes
            while len(memo) > self.max_sessions or (budget is not None and self.nbytes > budget):
                self.nbytes -= memo.popitem(last=False)[1].nbytes
        return keys

    def forget(self, session_id: str) -> None:
        dropped = self._memo.pop(session_id, None)
        if dropped is not None:
            self.nbytes -= dropped.nbytes


# --- vLLM v1's block hash (for relating KV-event hashes to token ids) -------------------------

VllmHashAlgo = Literal["sha256", "sha256_cbor"]
VLLM_DEFAULT_NONE_HASH_SEED = "vllm-none-hash"


def _vllm_hash_fn(algo: VllmHashAlgo) -> Any:
    if algo == "sha256":
        return lambda obj: hashlib.sha256(
            pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        ).digest()
    if algo == "sha256_cbor":
        import cbor2  # a vLLM dependency; only needed for this algorithm

        return lambda obj: hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()
    raise ValueError(f"unsupported vLLM prefix-caching hash algorithm {algo!r}")


def vllm_none_hash(algo: VllmHashAlgo = "sha256", seed: str | None = None) -> bytes:
    """The parent hash vLLM uses for a prompt's first block.

    `seed` defaults to the engine's rule: PYTHONHASHSEED when set, else "vllm-none-hash".
    """
    if seed is None:
        seed = os.environ.get("PYTHONHASHSEED", VLLM_DEFAULT_NONE_HASH_SEED)
    return _vllm_hash_fn(algo)(seed)


def vllm_block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    algo: VllmHashAlgo = "sha256",
    parent: bytes | None = None,
    extra_keys: Sequence[tuple[Any, ...] | None] | None = None,
    none_hash_seed: str | None = None,
) -> list[bytes]:
    """vLLM v1 block hashes of the full blocks of `token_ids` (bytes, as the engine keeps them).

    `parent` continues a chain (the hash of the block before `token_ids[0]`); `extra_keys`, one
    entry per block, carries what vLLM mixes in for LoRA, multimodal or cache-salted requests
    (None for plain text).
    """
    fn = _vllm_hash_fn(algo)
    prev = parent if parent else vllm_none_hash(algo, none_hash_seed)
    out: list[bytes] = []
    for j in range(len(token_ids) // block_size):
        extra = extra_keys[j] if extra_keys is not None else None
        block = tuple(int(t) for t in token_ids[j * block_size : (j + 1) * block_size])
        prev = fn((prev, block, extra))
        out.append(prev)
    return out


def vllm_event_hash(block_hash: bytes, as_int: bool = True) -> bytes | int:
    """A block hash as vLLM's KV events publish it (low 64 bits, big-endian, by default)."""
    if not as_int:
        return block_hash
    return int.from_bytes(block_hash, byteorder="big") & ((1 << 64) - 1)
