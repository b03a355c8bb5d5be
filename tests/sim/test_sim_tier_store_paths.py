"""The tier store's shortcuts answer as its general code does (sim/tiers.py, cache/tier_index.py).

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
from agentic_kvc.policy.base import RequestView, TierHits
from agentic_kvc.sim.tiers import Link, TierStore

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


def _stores(events: bool) -> tuple[TierStore, TierStore]:
    link = Link(1.0, 0.0)
    below = TierStore("disk", 300, 1, link, link)
    top = TierStore("host", 150, 1, link, link, below=below)
    if events:
        sink: list[dict[str, Any]] = []
        below.publish(sink.append)
        top.publish(sink.append)
    return top, below


@pytest.mark.parametrize("seed", range(6))
def test_evict_fast_loop_matches_the_general_loop(seed: int) -> None:
    rng = random.Random(seed)
    prompts = _prompts(rng, 40)
    fast, fast_below = _stores(events=False)
    full, full_below = _stores(events=True)
    evicted = 0
    for step in range(400):
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
        evicted = fast.evicted
    assert evicted > 0 and fast_below.n > 0  # the eviction loops did run


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
