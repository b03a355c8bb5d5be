"""The router's estimated view of KV tiers (cache/tier_index.py): HBM evictions go into a
host LRU, host evictions into a disk store shared by scope, write-through stores every routed
prompt, a reload keeps the host copy and makes it recent, and with no tier it is the plain
estimated index."""

from __future__ import annotations

import random

import pytest

from agentic_kvc.cache.chain_index import ChainedPrefixIndex
from agentic_kvc.cache.tier_index import TieredPrefixIndex, disk_groups, estimated_view, tier_blocks
from agentic_kvc.cache.tier_store import MARK, Link, TierStore
from agentic_kvc.config import KVTiersConfig
from agentic_kvc.policy.base import RequestView, TierHits

BS = 16
A = [1, 2, 3, 4]  # a prompt of 4 blocks (chained: a block's hash fixes its prefix)
B = [11, 12, 13, 14]


def _req(hashes: list[int]) -> RequestView:
    return RequestView("r", "s", 0, len(hashes) * BS + 1, 1, tuple(hashes), BS)


def test_eviction_stores_the_tail_in_host_and_a_reload_keeps_the_copy() -> None:
    idx = TieredPrefixIndex(2, hbm_blocks=6, host_blocks=8)
    idx.record(0, A, 0.0)
    idx.record(0, B, 1.0)  # 8 blocks in 6: A's last two blocks (its LRU tail) go to host
    assert idx.tier_hits(_req(A), 2) == [TierHits(2 * BS, 2 * BS, 0), TierHits(0)]
    assert idx.matched_tokens(_req(A), 2) == [2 * BS, 0]  # matched_tokens stays HBM
    assert idx.tier_blocks(0) == TierHits(6, 2, 0)
    # A again: its host blocks are reloaded into HBM (the host copy stays, as vLLM's CPU
    # cache keeps it), B's tail goes down instead.
    idx.record(0, A, 2.0)
    assert idx.tier_hits(_req(A), 1) == [TierHits(4 * BS, 0, 0)]
    assert idx.tier_hits(_req(B), 1) == [TierHits(2 * BS, 2 * BS, 0)]
    assert len(idx.host[0]) == 4 and idx.host[0].run(A, 2, 4) == 2


def test_host_evictions_fall_to_the_node_disk_which_its_neighbours_read() -> None:
    # Instances 0, 1 share node 0's disk; instance 2 is on node 1.
    idx = TieredPrefixIndex(3, 4, host_blocks=2, disk_blocks=10, disk_group=[0, 0, 1])
    idx.record(0, A, 0.0)
    idx.record(0, B, 1.0)  # A leaves HBM: host keeps its head (more recent), disk its tail
    assert idx.tier_hits(_req(A), 3)[0] == TierHits(0, 2 * BS, 2 * BS)
    assert len(idx.host[0]) == len(idx.disk[0]) == 2
    # Instance 1 holds no head of A anywhere: the disk run must start where its HBM hit ends.
    assert idx.tier_hits(_req(A), 3)[1:] == [TierHits(0), TierHits(0)]


def test_disk_without_host_takes_hbm_evictions_for_the_whole_node() -> None:
    idx = TieredPrefixIndex(3, 4, host_blocks=0, disk_blocks=10, disk_group=[0, 0, 1])
    idx.record(0, A, 0.0)
    idx.record(0, B, 1.0)
    assert idx.tier_hits(_req(A), 3) == [
        TierHits(0, 0, 4 * BS),
        TierHits(0, 0, 4 * BS),  # same node: reads the shared disk
        TierHits(0),
    ]


def test_a_demoted_prompt_is_written_below_and_evicted_first() -> None:
    """Pause-aware demotion (`store_below`): the prompt is written to host at once and its HBM
    blocks become the first evicted, ahead of an older prompt; a release to the front alone
    (finished sessions first) writes nothing. With no host tier the node's disk takes it."""
    idx = TieredPrefixIndex(1, hbm_blocks=8, host_blocks=8)
    idx.record(0, B, 0.0)
    idx.record(0, A, 1.0)
    idx.demote(0, A, 2.0, store_below=True)
    assert len(idx.host[0]) == 4 and idx.host[0].run(A, 0, 4) == 4
    idx.record(0, [21, 22], 3.0)  # 10 blocks in 8: A's tail goes, not the older B
    assert idx.tier_hits(_req(A), 1) == [TierHits(2 * BS, 2 * BS, 0)]
    assert idx.tier_hits(_req(B), 1) == [TierHits(4 * BS)]
    plain = TieredPrefixIndex(1, hbm_blocks=8, host_blocks=8)
    plain.record(0, B, 0.0)
    plain.record(0, A, 1.0)
    plain.demote(0, A, 2.0)
    assert len(plain.host[0]) == 0
    plain.record(0, [21, 22], 3.0)
    assert plain.tier_hits(_req(A), 1) == [TierHits(2 * BS, 2 * BS, 0)]  # (evicted to host)
    disk = TieredPrefixIndex(2, 8, host_blocks=0, disk_blocks=8, disk_group=[0, 0])
    disk.record(0, A, 0.0)
    disk.demote(0, A, 1.0, store_below=True)
    assert disk.tier_hits(_req(A), 2)[1] == TierHits(0, 0, 4 * BS)  # the node's disk


def test_write_through_keeps_host_a_superset() -> None:
    idx = TieredPrefixIndex(1, 4, host_blocks=8, write_through=True)
    idx.record(0, A, 0.0)
    assert idx.tier_hits(_req(A), 1) == [TierHits(4 * BS)]  # host continues after HBM: none
    assert len(idx.host[0]) == 4
    idx.record(0, B, 1.0)
    assert idx.tier_hits(_req(A), 1) == [TierHits(0, 4 * BS, 0)]
    assert idx.tier_hits(_req(B), 1) == [TierHits(4 * BS)]


def test_a_store_at_free_puts_each_routed_prompt_below_as_the_engine_does() -> None:
    # The engine stores each turn when it is freed (a lazy walk over its pool, or the
    # simulator's `lazy_store: free`), and at HBM eviction what is missing: the estimate puts
    # the routed prompt in host at `record`, so a small host tier holds copies of what HBM
    # holds, as the engine's does. Learning only from HBM's evictions it holds none of them.
    told = TieredPrefixIndex(1, 6, host_blocks=4, store_at_free=True)
    evictions_only = TieredPrefixIndex(1, 6, host_blocks=4)
    for idx in (told, evictions_only):
        idx.record(0, A, 0.0)
        idx.record(0, B, 1.0)  # HBM holds 6 blocks: A's last two go down
    # told: A stored, then B (A dropped for it: 4 blocks), then A's evicted two stored again,
    # eating B from its tail (the simple connector's order)
    assert told.tier_blocks(0) == TierHits(6, 4, 0)
    assert told.host[0].run(B, 0, 4) == 2 and told.host[0].run(A, 2, 4) == 2
    assert evictions_only.tier_blocks(0) == TierHits(6, 2, 0)
    assert evictions_only.host[0].run(B, 0, 4) == 0
    # the same hits for A (HBM's two, then host's two), from different tiers' contents
    assert told.tier_hits(_req(A), 1) == evictions_only.tier_hits(_req(A), 1)
    # write-through already stores every routed prompt: the flag adds nothing then
    assert not TieredPrefixIndex(1, 6, 4, write_through=True, store_at_free=True).store_at_free


def test_no_tier_answers_as_the_estimated_index() -> None:
    rng = random.Random(3)
    plain, tiered = ChainedPrefixIndex(4, 50), TieredPrefixIndex(4, 50)
    heads = [[rng.randrange(1 << 40)] for _ in range(6)]
    for step in range(300):
        chain = list(rng.choice(heads))
        n = rng.randrange(1, 40)
        prompt = chain + [hash((chain[0], j)) for j in range(1, n)]
        inst = rng.randrange(4)
        plain.record(inst, prompt, float(step))
        tiered.record(inst, prompt, float(step))
        q = _req(prompt[: rng.randrange(1, len(prompt) + 1)])
        want = plain.matched_tokens(q, 4)
        assert tiered.matched_tokens(q, 4) == want
        assert [t.hbm for t in tiered.tier_hits(q, 4)] == want
        assert all(t.host == t.disk == 0 for t in tiered.tier_hits(q, 4))
    off = estimated_view(4, 50, BS, KVTiersConfig(), 98_304.0, "h20")
    assert type(off) is ChainedPrefixIndex


def test_sizes_and_scopes_from_the_config() -> None:
    # 1 GiB of Qwen3-Coder-30B KV (98,304 B/token) in 16-token blocks.
    assert tier_blocks(1.0, 98_304, 16) == (1 << 30) // (98_304 * 16) == 682
    assert tier_blocks(0.0, 98_304, 16) == 0
    assert disk_groups(5, "instance", 2) == [0, 1, 2, 3, 4]
    assert disk_groups(5, "node", 2) == [0, 0, 1, 1, 2]
    assert disk_groups(5, "node", None) == [0] * 5
    assert disk_groups(5, "fleet", 2) == [0] * 5
    cfg = KVTiersConfig(host_gib=1.0, disk_gib=2.0, disk_scope="instance")
    view = estimated_view(16, 1000, 16, cfg, 98_304.0, "h20")
    assert isinstance(view, TieredPrefixIndex)
    assert view.host[0].capacity == 682 and view.disk[0].capacity == 1365
    assert view.disk_group == list(range(16))
    with pytest.raises(ValueError, match="kv_bytes_per_token"):
        tier_blocks(1.0, 0, 16)


def test_a_reload_makes_the_host_copy_recent() -> None:
    c = [21, 22, 23, 24]
    idx = TieredPrefixIndex(1, 4, host_blocks=6)
    idx.record(0, A, 0.0)
    idx.record(0, B, 1.0)  # A to host
    idx.record(0, c, 2.0)  # B to host: 8 > 6, A's tail (least recent) goes
    assert idx.tier_hits(_req(A), 1) == [TierHits(0, 2 * BS, 0)]
    idx.record(0, A, 3.0)  # A's host run is reloaded, so used now; C goes to host
    # 4 over capacity: B is now the least recent run, not A.
    assert idx.host[0].run(B, 0, 4) == 0 and idx.host[0].run(A, 0, 4) == 2
    assert idx.tier_hits(_req(c), 1) == [TierHits(0, 4 * BS, 0)]


def _chains(rng: random.Random, n: int, length: int) -> tuple[list[list[int]], dict[int, int]]:
    """`n` chained prompts of `length` blocks that share prefixes (each branches off an
    earlier one), and every hash's chain position."""
    chains: list[list[int]] = []
    pos: dict[int, int] = {}
    nxt = 1
    for _ in range(n):
        keep = rng.randrange(length) if chains else 0
        head = rng.choice(chains)[:keep] if chains else []
        tail = list(range(nxt, nxt + length - keep))
        nxt += length - keep
        pos.update((h, keep + k) for k, h in enumerate(tail))
        chains.append(head + tail)
    return chains, pos


@pytest.mark.parametrize("seed", range(4))
def test_store_finds_stored_blocks_as_a_full_scan_would(seed: int) -> None:
    # The store answers "does this run hold an indexed block, and where is the first" from
    # its MARK positions and its off-MARK heads; on chained hashes that is what a scan of
    # every block against the index gives (the answer the store's records depend on).
    rng = random.Random(seed)
    chains, pos = _chains(rng, 30, 400)
    store = TierStore("t", 1500, 1, Link(1.0, 0.0), Link(1.0, 0.0))
    few_heads = 0  # probes answered from the heads, not by a scan (the store's fast path)
    for step in range(400):
        c = rng.choice(chains)
        lo = rng.randrange(len(c))
        hi = rng.randrange(lo + 1, len(c) + 1)
        keys = store.index.keys()
        assert store.offmark == {h: pos[h] for h in keys if pos[h] % MARK}
        for a in (lo, rng.randrange(lo, hi)):
            probe = c[a:hi]
            few_heads += bool(store.offmark)
            assert store._disjoint(probe, a) == keys.isdisjoint(probe), (step, a, hi)
            if not keys.isdisjoint(probe):
                first = min(k for k, h in enumerate(c[lo:hi]) if h in keys)
                assert store._first_key(c[lo:hi], 0) == first
        store.put([(lo, c[lo:hi])], float(step))
        assert len(store) <= store.capacity
    assert few_heads > 50
