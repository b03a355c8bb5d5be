"""The tier store's shortcuts answer as its general code does (cache/tier_store.py,
cache/tier_index.py).

`TierStore._evict` has a loop for the common case (LRU, no KV events) beside the general one
(retention, events); a store given an event sink always takes the general one, so two stores fed
the same random chained runs, one with a sink and one without, must end every step in the same
state, and so must the stores below them that take what they evict. `TieredPrefixIndex.tier_hits`
skips an instance's host walk when the host index holds none of the probed blocks; its answers
must equal a walk on every instance.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentic_kvc.cache.tier_index import TieredPrefixIndex
from agentic_kvc.cache.tier_store import MARK, Link, TierStore
from agentic_kvc.policy.base import RequestView, TierHits

BS = 16


def _prompts(rng: random.Random, n: int) -> list[list[int]]:
    """Chained prompts: each branches off an earlier one at a random block (shared prefix,
    then its own hashes), so a hash fixes its position and its prefix."""
    out: list[list[int]] = []
    fresh = iter(range(1, 10**9))
    for _ in range(n):
        length = rng.randint(1, 120)
        if out and rng.random() < 0.7:
            base = rng.choice(out)
            k = rng.randint(0, min(len(base), length))
            out.append(base[:k] + [next(fresh) for _ in range(length - k)])
        else:
            out.append([next(fresh) for _ in range(length)])
    return out


def _state(store: TierStore) -> Any:
    return (
        [(r.lo, list(r.hashes)) for r in store.lru],
        sorted((h, r.lo, len(r.hashes)) for h, r in store.index.items()),
        sorted(store.offmark.items()),
        store.n,
        store.evicted,
    )


def _stores(events: bool, simple_lru: bool = False) -> tuple[TierStore, TierStore]:
    link = Link(1.0, 0.0)
    below = TierStore("disk", 300, 1, link, link, simple_lru=simple_lru)
    top = TierStore("host", 150, 1, link, link, below=below, simple_lru=simple_lru)
    if events:
        sink: list[dict[str, Any]] = []
        below.publish(sink.append)
        top.publish(sink.append)
    return top, below


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("simple_lru", [False, True])
def test_evict_fast_loop_matches_the_general_loop(seed: int, simple_lru: bool) -> None:
    rng = random.Random(seed)
    prompts = _prompts(rng, 40)
    fast, fast_below = _stores(events=False, simple_lru=simple_lru)
    full, full_below = _stores(events=True, simple_lru=simple_lru)
    evicted = 0
    head_cuts = 0
    for step in range(400):
        heads = {id(r): r.lo for r in fast.lru if r.head_first}
        p = rng.choice(prompts)
        a = rng.randrange(len(p))
        b = rng.randint(a + 1, len(p))
        op = rng.random()
        if op < 0.6:  # HBM hands a stretch down (copies: a store keeps and trims its lists)
            sampled = [rng.random() < 0.5]
            got = fast.put([(a, p[a:b])], float(step), sampled)
            assert full.put([(a, p[a:b])], float(step), sampled) == got
        elif op < 0.8:  # a load uses what the store holds from a
            k = fast.run(p, a, b)
            assert full.run(p, a, b) == k
            if k:
                fast.touch(p, a, a + k)
                full.touch(p, a, a + k)
        else:
            assert fast.run(p, a, b) == full.run(p, a, b)
        assert _state(fast) == _state(full)
        assert _state(fast_below) == _state(full_below)
        _check_index(fast)
        _check_index(fast_below)
        evicted = fast.evicted
        head_cuts += sum(1 for r in fast.lru if heads.get(id(r), r.lo) < r.lo)
    assert evicted > 0 and fast_below.n > 0  # the eviction loops did run
    # With simple_lru, runs a load used were eaten from their head.
    assert (head_cuts > 0) == simple_lru


def _check_index(store: TierStore) -> None:
    """Every run is indexed at its head and its MARK positions, off-MARK heads by bucket, and
    the store counts its blocks."""
    for r in store.lru:
        assert r.hashes
        assert r.hashes[0] in store.index  # (a block held twice may index the other run)
        for k, h in enumerate(r.hashes):
            if (r.lo + k) % MARK == 0:
                assert h in store.index
        if r.lo % MARK:
            assert store.offb[r.lo // MARK].get(r.hashes[0]) == r.lo
    assert store.n == sum(len(r.hashes) for r in store.lru)


def _req(hashes: list[int]) -> RequestView:
    return RequestView("r", "s", 0, len(hashes) * BS + 1, 1, tuple(hashes), BS)


@pytest.mark.parametrize("seed", range(4))
def test_tier_hits_skip_equals_a_walk_on_every_instance(seed: int) -> None:
    rng = random.Random(seed)
    prompts = _prompts(rng, 30)
    n = 4
    idx = TieredPrefixIndex(n, hbm_blocks=60, host_blocks=200)
    hosts = 0
    for step in range(300):
        p = rng.choice(prompts)
        hits = idx.tier_hits(_req(p), n)
        hbm = idx.hbm.matched_blocks(p, n)
        want = [
            TierHits(m * BS, idx.host[i].run(p, m, len(p)) * BS if m < len(p) else 0, 0)
            for i, m in enumerate(hbm)
        ]
        assert hits == want
        hosts += sum(1 for h in hits if h.host)
        idx.record(rng.randrange(n), p, float(step))
    assert hosts > 0  # some answers came from the host walk


def _find_block_by_block(store: TierStore, hashes: list[int], j: int, base: int) -> Any:
    """`TierStore._find` as first written: the index probed one block at a time, from j down
    to the MARK position at or below it, then (when hashes starts after that) up to the next."""
    index = store.index
    h = hashes[j]
    floor = j - (base + j) % MARK

    def holds_j(i: int) -> Any:
        r = index.get(hashes[i])
        k = base + j - r.lo if r is not None else -1
        return r if r is not None and 0 <= k < len(r.hashes) and r.hashes[k] == h else None

    for i in range(j, max(floor, 0) - 1, -1):
        if (r := holds_j(i)) is not None:
            return r
    if floor < 0:
        for i in range(j + 1, min(floor + MARK + 1, len(hashes))):
            if (r := holds_j(i)) is not None:
                return r
    return None


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("simple_lru", [False, True])
def test_find_in_one_pass_matches_the_block_by_block_probe(seed: int, simple_lru: bool) -> None:
    """`_find` takes the runs indexed among the probed blocks in one C pass; it must return
    the run the block-by-block probe returns, also for hashes that start off a MARK position
    (a run handed down by an eviction, or one whose head was evicted) and for the runs that
    hold a block twice."""
    rng = random.Random(seed)
    prompts = _prompts(rng, 40)
    store, _ = _stores(events=False, simple_lru=simple_lru)
    found = 0
    for step in range(300):
        p = rng.choice(prompts)
        a = rng.randrange(len(p))
        b = rng.randint(a + 1, len(p))
        store.put([(a, p[a:b])], float(step), [rng.random() < 0.5])
        if rng.random() < 0.3 and (k := store.run(p, a, b)):
            store.touch(p, a, a + k)
        q = rng.choice(prompts)
        s = rng.randrange(len(q))
        tail = q[s:]
        for j in range(len(tail)):
            got = store._find(tail, j, s)
            assert got is _find_block_by_block(store, tail, j, s)
            found += got is not None
    assert found > 0


def _stepped(seed: int, probe: bool, write_through: bool) -> list[Any]:
    """A router's tier model fed random routed prompts, each `record` after a `tier_hits` of
    the same prompt, sometimes with a `clear` or `advance` in between (which drop the probe).
    With `probe` both get the same hash list, so the record takes the probe's walks; without,
    the record gets a copy and walks again. The answers and the stores' states, per step."""
    rng = random.Random(seed)
    prompts = _prompts(rng, 30)
    n = 3
    idx = TieredPrefixIndex(
        n, hbm_blocks=50, host_blocks=120, disk_blocks=200, write_through=write_through
    )
    states: list[Any] = []
    used = 0
    for step in range(300):
        p = list(rng.choice(prompts))
        i = rng.randrange(n)
        hits = idx.tier_hits(RequestView("r", "s", 0, len(p) * BS + 1, 1, p, BS), n)
        op = rng.random()
        if op < 0.05:
            idx.clear(rng.randrange(n))
        elif op < 0.1:
            idx.advance(float(step))
        used += idx._probe is not None
        idx.record(i, p if probe else list(p), float(step))
        states.append((hits, [_state(s) for s in idx.host], [_state(s) for s in idx.disk]))
    assert used > (0 if probe and not write_through else -1)
    return states


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("write_through", [False, True])
def test_record_after_tier_hits_matches_record_alone(seed: int, write_through: bool) -> None:
    """`record` of the instance `tier_hits` just probed uses the probe's HBM prefix and host
    walk; the router's tier model must end every step as when `record` walks again."""
    with_probe = _stepped(seed, True, write_through)
    assert with_probe == _stepped(seed, False, write_through)
    assert any(s[0][k].host for s in with_probe for k in range(3))  # host hits were used
