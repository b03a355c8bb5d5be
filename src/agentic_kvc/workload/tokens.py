"""Token synthesis: a request's content blocks as token ids, text, and engine block hashes.

The contract (see `model.py`): token k of content block B is a pure function of (B, k). Two
requests therefore share exactly the tokens of their common leading blocks, plus the common
leading tokens of a block both hold in part (a trace's partial last block is a true prefix of
the same block in full). A real vLLM prefix cache, whatever its block size (16, 32...), then
sees exactly the reuse the trace encodes.

`engine_block_hashes` gives the same answer as hashing those tokens in blocks of an engine's
size, without making them: every position is identified by (B, k), and positions inside block
m are hashed from a chain state S_{m-1} that stands for every token before block m:

    base_m     = mix(S_{m-1} xor mix(B_m))
    hash(m, k) = mix(base_m + k * GOLDEN)            (engine block ending at offset k of m)
    S_m        = hash(m, t_m)                         (t_m = tokens in block m)

`mix` is the splitmix64 finalizer, a bijection on 64 bits, so two positions get equal hashes
exactly when their (base, k) are equal, up to 64-bit collisions (about n^2 / 2^64 for n
distinct blocks): equal hashes <=> equal token prefixes through that engine block. The chain
over content blocks is a short Python loop; the engine blocks inside are one numpy pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from agentic_kvc.workload.model import Block, Request

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_TOKEN_SALT = 0x6A09E667F3BCC908  # different salts: token values and chain hashes independent
_CHAIN_SALT = 0xBB67AE8584CAA73B
_U = np.uint64


def mix64(x: int) -> int:
    """splitmix64's finalizer on a Python int (bijective on 64 bits)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * _M1) & MASK64
    x = ((x ^ (x >> 27)) * _M2) & MASK64
    return x ^ (x >> 31)


# numpy scalars made once: a prompt's hashes are a few small numpy passes, where making
# these per call was a noticeable part (issue 16).
_S30, _S27, _S31, _UM1, _UM2 = _U(30), _U(27), _U(31), _U(_M1), _U(_M2)


def _mix64_np(x: np.ndarray) -> np.ndarray:
    """The same finalizer on a uint64 array, in place where possible (wraps mod 2^64)."""
    x ^= x >> _S30
    x *= _UM1
    x ^= x >> _S27
    x *= _UM2
    x ^= x >> _S31
    return x


def _block_positions(blocks: Sequence[Block]) -> tuple[np.ndarray, np.ndarray, int]:
    """(block index of every token, offset of every token inside its block, total)."""
    sizes = np.fromiter((b.tokens for b in blocks), dtype=np.int64, count=len(blocks))
    total = int(sizes.sum())
    which = np.repeat(np.arange(len(blocks)), sizes)
    starts = np.cumsum(sizes) - sizes
    offsets = np.arange(total, dtype=np.int64) - starts[which]
    return which, offsets, total


# --- token ids ------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _allowed_ids(vocab_size: int, special_ids: frozenset[int], min_id: int) -> np.ndarray:
    ids = np.arange(min_id, vocab_size, dtype=np.int64)
    if special_ids:
        ids = ids[~np.isin(ids, np.fromiter(special_ids, dtype=np.int64))]
    if len(ids) < 2:
        raise ValueError(
            f"vocab_size {vocab_size} leaves {len(ids)} usable token ids after min_id "
            f"{min_id} and {len(special_ids)} special ids"
        )
    return ids


def block_token_values(blocks: Sequence[Block]) -> np.ndarray:
    """64-bit pseudo-random value of every token position: mix(mix(B ^ salt) + k * GOLDEN)."""
    if not blocks:
        return np.zeros(0, dtype=np.uint64)
    bases = np.fromiter(
        (mix64(b.id ^ _TOKEN_SALT) for b in blocks), dtype=np.uint64, count=len(blocks)
    )
    which, offsets, _ = _block_positions(blocks)
    vals = bases[which] + offsets.astype(np.uint64) * _U(GOLDEN)
    return _mix64_np(vals)


def request_token_ids(
    request: Request | Sequence[Block],
    vocab_size: int,
    *,
    special_ids: Iterable[int] = (),
    min_id: int = 0,
) -> list[int]:
    """The synthesized prompt of `request` as token ids in [min_id, vocab_size).

    Token k of block B depends only on (B, k); `special_ids` (BOS/EOS/chat markers) and ids
    below `min_id` are never produced, so a prompt cannot end early or change the template.
    Use `special_token_ids(model_dir)` for a tokenizer's own special ids.
    """
    blocks = request.blocks if isinstance(request, Request) else tuple(request)
    allowed = _allowed_ids(int(vocab_size), frozenset(int(i) for i in special_ids), int(min_id))
    vals = block_token_values(blocks)
    return allowed[(vals % _U(len(allowed))).astype(np.int64)].tolist()


def special_token_ids(model_dir: str | Path) -> frozenset[int]:
    """Ids of a Hugging Face tokenizer's special (added) tokens, read from tokenizer.json."""
    import json

    data = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    return frozenset(int(t["id"]) for t in data.get("added_tokens", []) if t.get("special", True))


# --- text -----------------------------------------------------------------------------------

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 syllables


@lru_cache(maxsize=1)
def _words() -> list[str]:
    """4,900 two-syllable words: short, plain ASCII, one or two tokens in most vocabularies."""
    return [a + b for a in _SYLLABLES for b in _SYLLABLES]


def request_text(request: Request | Sequence[Block]) -> str:
    """The prompt as text for chat/completions endpoints that take strings.

    One word per synthesized token position, each followed by a space, so the text of a shared
    block prefix is a shared string prefix and word boundaries never straddle two blocks. A
    real tokenizer turns a word into one or two tokens, so the engine-side length is about
    1-2x `input_tokens`; use token ids (`request_token_ids`) when lengths must be exact.
    """
    blocks = request.blocks if isinstance(request, Request) else tuple(request)
    words = _words()
    idx = (block_token_values(blocks) % _U(len(words))).tolist()
    return "".join(words[i] + " " for i in idx)


def request_messages(request: Request) -> list[dict[str, str]]:
    """Chat messages carrying `request_text` (one user message; the template adds the rest)."""
    return [{"role": "user", "content": request_text(request)}]


def block_messages(request: Request) -> list[dict[str, str]]:
    """The prompt as a conversation, one message per workload block (the first a system
    message, then user and assistant in turn), each block's words as in `request_text`.

    An agent's next turn re-sends its earlier messages and appends the reply and the tool
    output; a workload turn extends the blocks of the one before. So the messages of a turn
    start with the whole message list of the turn it extends, and a chat endpoint (the proxy's
    renderer and token memo, the engine's prefix cache) sees what it sees from an agent."""
    words = _words()
    idx = (block_token_values(request.blocks) % _U(len(words))).tolist()
    out: list[dict[str, str]] = []
    start = 0
    for j, block in enumerate(request.blocks):
        text = "".join(words[i] + " " for i in idx[start : start + block.tokens])
        start += block.tokens
        role = "system" if j == 0 else ("user" if j % 2 else "assistant")
        out.append({"role": role, "content": text})
    return out


# --- engine block hashes --------------------------------------------------------------------


def chain_states(
    blocks: Sequence[Block], known: tuple[list[int], list[int]] | None = None
) -> tuple[list[int], list[int]]:
    """(base_m, S_m) for every content block (see the module docstring). `known`: those of
    the leading blocks, already computed (a session's next turn shares its previous prompt's
    leading blocks, and with them their chain)."""
    bases, states = (known[0][:], known[1][:]) if known else ([], [])
    state = states[-1] if states else _CHAIN_SALT
    for b in blocks[len(bases) :]:
        base = mix64(state ^ mix64(b.id))
        state = mix64(base + b.tokens * GOLDEN)
        bases.append(base)
        states.append(state)
    return bases, states


def engine_block_hashes(
    request: Request | Sequence[Block],
    block_size: int,
    start: int = 0,
    bases: Sequence[int] | None = None,
) -> list[int]:
    """One chained 64-bit hash per FULL engine block of `block_size` tokens.

    Hash j stands for the synthesized tokens [0, (j + 1) * block_size): two requests get equal
    hash j exactly when those tokens are equal (up to 64-bit collisions). A trailing partial
    engine block gets no hash, as in vLLM. Costs one Python step per content block and one
    vectorised step per engine block (no token is made). `start`: hashes of engine blocks
    `start` onwards only (a caller that has the earlier ones, e.g. from the session's
    previous turn, extends them). `bases`: `chain_states(blocks)[0]`, if the caller has them.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    blocks = request.blocks if isinstance(request, Request) else tuple(request)
    if not blocks:
        return []
    if bases is None:
        bases, _ = chain_states(blocks)
    # Engine block j ends at token e = (j + 1) * block_size, in the content block m with
    # s_m < e <= s_m + t_m (s_m: tokens before m), at offset k = e - s_m: inside one content
    # block the values base_m + k * GOLDEN step by block_size * GOLDEN. One ramp for all of
    # them, plus a constant per content block (a few), then one mix.
    first = block_size * (start + 1)
    step = (GOLDEN * block_size) & MASK64
    offsets: list[int] = []  # per content block with engine block ends: value - ramp
    counts: list[int] = []  # how many engine blocks end in it
    n = s = 0
    for b, base in zip(blocks, bases, strict=True):
        c = s + b.tokens
        e0 = max((s // block_size + 1) * block_size, first)
        if e0 <= c:
            cnt = (c - e0) // block_size + 1
            offsets.append((base + (e0 - s) * GOLDEN - n * step) & MASK64)
            counts.append(cnt)
            n += cnt
        s = c
    if not n:
        return []
    vals = np.arange(n, dtype=np.uint64)
    vals *= _U(step)
    if len(offsets) == 1:
        vals += _U(offsets[0])
    else:
        vals += np.repeat(np.array(offsets, dtype=np.uint64), counts)
    return _mix64_np(vals).tolist()
