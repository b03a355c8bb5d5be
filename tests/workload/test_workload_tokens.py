"""Token synthesis: shared block prefixes <=> shared tokens <=> equal engine block hashes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.workload import Block, engine_block_hashes, request_text, request_token_ids
from agentic_kvc.workload.tokens import block_token_values

TINY_VOCAB = 8192
SPECIALS = (0, 1, 2)


def _positions(blocks: tuple[Block, ...]) -> list[tuple[int, int]]:
    """The definition: position i holds token k of block B."""
    return [(b.id, k) for b in blocks for k in range(b.tokens)]


def _lcp(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


_block = st.builds(Block, st.integers(0, 40), st.integers(1, 70))


@st.composite
def request_pair(draw: st.DrawFn) -> tuple[tuple[Block, ...], tuple[Block, ...]]:
    """Two prompts that share some leading blocks, then maybe part of one, then diverge.

    Ids are drawn from a small range on purpose: the same block may reappear elsewhere, which
    the contract allows (same content) and which must not create sharing by itself.
    """
    a = draw(st.lists(_block, min_size=0, max_size=6))
    # A block id keeps one content; its lengths may differ (a partial block), so dedupe ids
    # within a prompt to keep "token k of B" single-valued per prompt.
    seen: set[int] = set()
    a = [b for b in a if not (b.id in seen or seen.add(b.id))]
    j = draw(st.integers(0, len(a)))
    b = list(a[:j])
    if j < len(a) and draw(st.booleans()):
        b.append(Block(a[j].id, draw(st.integers(1, 90))))  # same block, another length
    used = {x.id for x in b}
    b += [x for x in draw(st.lists(_block, max_size=4)) if x.id not in used and not used.add(x.id)]
    return tuple(a), tuple(b)


@settings(max_examples=200, deadline=None)
@given(pair=request_pair())
def test_tokens_share_exactly_the_block_prefix(pair: tuple[tuple[Block, ...], ...]) -> None:
    a, b = pair
    expected = _lcp(_positions(a), _positions(b))
    ta = request_token_ids(a, TINY_VOCAB, special_ids=SPECIALS)
    tb = request_token_ids(b, TINY_VOCAB, special_ids=SPECIALS)
    assert len(ta) == sum(x.tokens for x in a)
    got = _lcp(ta, tb)
    # Tokens agree through the shared prefix; after it a 1/8189 chance per position of an
    # equal token by coincidence, so three more agreeing positions would be a real bug.
    assert got >= expected
    if expected < min(len(ta), len(tb)):
        assert got < expected + 3
    # The 64-bit values behind the ids: no coincidences there.
    va, vb = block_token_values(a).tolist(), block_token_values(b).tolist()
    assert _lcp(va, vb) == expected


@settings(max_examples=200, deadline=None)
@given(pair=request_pair(), block_size=st.sampled_from([1, 3, 16, 32, 64]))
def test_engine_hashes_equal_iff_token_prefixes_equal(
    pair: tuple[tuple[Block, ...], ...], block_size: int
) -> None:
    a, b = pair
    pa, pb = _positions(a), _positions(b)
    ha, hb = engine_block_hashes(a, block_size), engine_block_hashes(b, block_size)
    assert len(ha) == len(pa) // block_size and len(hb) == len(pb) // block_size
    for j in range(min(len(ha), len(hb))):
        end = (j + 1) * block_size
        assert (ha[j] == hb[j]) == (pa[:end] == pb[:end]), (j, block_size)
    # Chained: a hash never repeats inside one prompt.
    assert len(set(ha)) == len(ha)


def test_engine_hashes_match_real_token_blocks() -> None:
    """Same answer as hashing the synthesized tokens block by block (a 16-token engine)."""
    reqs = [
        (Block(5, 512), Block(6, 512), Block(7, 100)),
        (Block(5, 512), Block(6, 512), Block(7, 512), Block(8, 37)),
        (Block(5, 512), Block(9, 300)),
        (Block(5, 300),),
    ]
    bs = 16
    toks = [request_token_ids(r, 1 << 20) for r in reqs]
    hashes = [engine_block_hashes(r, bs) for r in reqs]
    for i in range(len(reqs)):
        for k in range(len(reqs)):
            for j in range(min(len(hashes[i]), len(hashes[k]))):
                same_tokens = toks[i][: (j + 1) * bs] == toks[k][: (j + 1) * bs]
                assert (hashes[i][j] == hashes[k][j]) == same_tokens


@settings(max_examples=50, deadline=None)
@given(
    blocks=st.lists(_block, min_size=1, max_size=5),
    vocab=st.integers(10, 300),
    specials=st.sets(st.integers(0, 9), max_size=5),
    min_id=st.integers(0, 3),
)
def test_tokens_avoid_special_ids(
    blocks: list[Block], vocab: int, specials: set[int], min_id: int
) -> None:
    ids = request_token_ids(tuple(blocks), vocab, special_ids=specials, min_id=min_id)
    assert all(min_id <= t < vocab and t not in specials for t in ids)
    again = request_token_ids(tuple(blocks), vocab, special_ids=specials, min_id=min_id)
    assert ids == again


def test_token_of_block_depends_only_on_block_and_offset() -> None:
    x = request_token_ids((Block(1, 10), Block(42, 20)), TINY_VOCAB)
    y = request_token_ids((Block(42, 25), Block(3, 4)), TINY_VOCAB)
    assert x[10:30] == y[:20]


def test_text_shares_a_string_prefix_through_shared_blocks() -> None:
    a = request_text((Block(1, 50), Block(2, 20)))
    b = request_text((Block(1, 50), Block(3, 20)))
    shared = request_text((Block(1, 50),))
    assert a.startswith(shared) and b.startswith(shared)
    assert a != b and len(a.split()) == 70
