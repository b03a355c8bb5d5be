"""Tier-aware routing (issue 29): the view's TierHits, the router's reload accounting, and the
peers' tier-aware rules (Dynamo host/disk weights, llm-d precise and tiered), each where the
tier information changes the answer and where it must not; the session-affinity baselines."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from policy_helpers import FixedCache, req

from agentic_kvc.policy import get_policy
from agentic_kvc.policy.base import Decision, FleetView, InstanceView, RequestView, TierHits
from agentic_kvc.policy.fleet import RouterState

BS = 16


@dataclass
class FixedTiers:
    """A tier-aware cache view from a table: instance -> (hbm, host, disk) tokens."""

    tiers: Mapping[int, tuple[int, int, int]] = field(default_factory=dict)

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        return [self.tiers.get(i, (0, 0, 0))[0] for i in range(n_instances)]

    def tier_hits(self, request: RequestView, n_instances: int) -> list[TierHits]:
        return [TierHits(*self.tiers.get(i, (0, 0, 0))) for i in range(n_instances)]


def _fleet(n: int, cache: object, **per: list[object]) -> FleetView:
    insts = [InstanceView(index=i, **{k: v[i] for k, v in per.items()}) for i in range(n)]  # type: ignore[arg-type]
    return FleetView(instances=insts, cache=cache)  # type: ignore[arg-type]


# Instance 0 holds 99 of a 100-block prompt in host memory only; instance 1 holds 25 in HBM.
HOST_VS_HBM = {0: (0, 99 * BS, 0), 1: (25 * BS, 0, 0)}


def test_fleet_view_tier_hits_cap_at_the_last_token_in_tier_order() -> None:
    view = _fleet(2, FixedTiers({0: (64, 48, 32), 1: (0, 0, 200)}))
    r = req(100)
    assert view.tier_hits(r) == [TierHits(64, 35, 0), TierHits(0, 0, 99)]
    assert view.cached_tokens(r) == [64, 0]  # the same HBM answer
    assert view.knows_tiers
    plain = _fleet(2, FixedCache({0: 64}))
    assert plain.tier_hits(r) == [TierHits(64), TierHits(0)] and not plain.knows_tiers


def test_router_state_counts_reloads_as_the_links_queue_not_as_prefill() -> None:
    state = RouterState(2)
    r = req(1000)
    d = Decision(0, 0, "WARM", "x", predicted_cached_tokens=300)
    d.predicted_host_tokens, d.predicted_disk_tokens = 500, 100
    t = state.admit(r, d)
    i0 = state.instances[0]
    assert (i0.pending_prefill_tokens, i0.pending_host_reload_tokens) == (100, 500)
    assert i0.pending_disk_reload_tokens == 100
    state.first_token(t)
    assert (i0.pending_prefill_tokens, i0.pending_host_reload_tokens) == (0, 0)
    assert i0.pending_disk_reload_tokens == 0


def test_dynamo_credits_host_hits_at_its_weight() -> None:
    r = req(100 * BS)
    tiered = get_policy("dynamo_kv").decide(r, _fleet(2, FixedTiers(HOST_VS_HBM)))
    # overlap 0.75 * 99 = 74.25 blocks on 0 against 25 on 1.
    assert tiered.prefill == 0 and tiered.predicted_host_tokens == 99 * BS
    assert tiered.scores[0] == pytest.approx(100 - 74.25)
    blind = get_policy("dynamo_kv", {"host_cache_hit_weight": 0.0, "disk_cache_hit_weight": 0.0})
    d = blind.decide(r, _fleet(2, FixedTiers(HOST_VS_HBM)))
    assert d.prefill == 1 and d.predicted_host_tokens == 0
    # Below the weight's break-even (25 / 0.75 = 33.3 blocks) HBM still wins.
    d = get_policy("dynamo_kv").decide(
        r, _fleet(2, FixedTiers({0: (0, 33 * BS, 0), 1: (25 * BS, 0, 0)}))
    )
    assert d.prefill == 1
    # Disk at 0.25: 99 disk blocks = 24.75 < 25 HBM blocks.
    d = get_policy("dynamo_kv").decide(
        r, _fleet(2, FixedTiers({0: (0, 0, 99 * BS), 1: (25 * BS, 0, 0)}))
    )
    assert d.prefill == 1


def test_llmd_precise_weighs_media_and_llmd_tiered_adds_a_cpu_scorer() -> None:
    r = req(100 * BS)
    assert get_policy("llmd_weighted").decide(r, _fleet(2, FixedTiers(HOST_VS_HBM))).prefill == 1
    d = get_policy("llmd_precise").decide(r, _fleet(2, FixedTiers(HOST_VS_HBM)))
    assert d.prefill == 0 and d.predicted_host_tokens == 99 * BS
    # queue 2 + KV 2 + prefix 3 * 0.8 * 99/100
    assert d.scores[0] == pytest.approx(4 + 3 * 0.8 * 0.99)
    d = get_policy("llmd_tiered").decide(r, _fleet(2, FixedTiers(HOST_VS_HBM)))
    assert d.prefill == 0
    assert d.scores[0] == pytest.approx(4 + 0 + 0.99) and d.scores[1] == pytest.approx(4.5)
    # The queue scorer (weight 2) outweighs the CPU scorer's 0.99 - 0.5 edge.
    d = get_policy("llmd_tiered").decide(r, _fleet(2, FixedTiers(HOST_VS_HBM), num_requests=[3, 0]))
    assert d.prefill == 1


@pytest.mark.parametrize("name", ["dynamo_kv", "llmd_precise", "llmd_tiered"])
def test_no_lower_tier_hit_means_the_hbm_only_decision(name: str) -> None:
    rng = random.Random(name)
    for _ in range(200):
        n = rng.randrange(2, 6)
        hbm = {i: rng.randrange(0, 60) * BS for i in range(n)}
        load = {
            "num_requests": [rng.randrange(5) for _ in range(n)],
            "pending_prefill_tokens": [rng.randrange(3000) for _ in range(n)],
            "decode_tokens": [rng.randrange(5000) for _ in range(n)],
        }
        r = req(60 * BS + 5)
        a = get_policy(name).decide(
            r, _fleet(n, FixedTiers({i: (h, 0, 0) for i, h in hbm.items()}), **load)
        )
        b = get_policy(name).decide(r, _fleet(n, FixedCache(hbm), **load))
        assert (a.prefill, a.scores) == (b.prefill, b.scores)


def _sreq(session: str, last: bool | None = False) -> RequestView:
    return RequestView(f"{session}-{random.random()}", session, 0, 100, 4, (), BS, last)


def test_sticky_least_loaded_counts_open_sessions_until_the_finish_signal() -> None:
    pol = get_policy("sticky_least_loaded")
    f = _fleet(3, FixedCache())
    assert pol.decide(_sreq("a"), f).prefill == 0
    assert pol.decide(_sreq("b"), f).prefill == 1
    busy = _fleet(3, FixedCache(), num_requests=[9, 0, 0])
    d = pol.decide(_sreq("a"), busy)
    assert (d.prefill, d.reason) == (0, "sticky")  # stays with its KV however busy
    # Nothing in flight anywhere (tool pauses): the open sessions still count, so a new
    # session goes to the one instance without one, not to a round-robin or idle-looking one.
    assert pol.decide(_sreq("c"), f).prefill == 2
    d = pol.decide(_sreq("a", last=True), f)
    assert (d.prefill, d.reason) == (0, "sticky+finish")
    assert pol.open_sessions == {0: 0, 1: 1, 2: 1}
    # a finished: instance 0 is the least loaded in sessions, though busiest in requests.
    assert pol.decide(_sreq("d"), _fleet(3, FixedCache(), num_requests=[4, 0, 0])).prefill == 0
    # d's instance fails: d is placed again, its old slot freed.
    d = pol.decide(_sreq("d"), _fleet(3, FixedCache(), healthy=[False, True, True]))
    assert d.prefill in (1, 2) and d.reason == "new_session"
    assert sorted(pol.open_sessions.values()) == [0, 1, 2]


def test_sticky_idle_ttl_releases_sessions_without_a_finish_signal() -> None:
    pol = get_policy("sticky_least_loaded", {"idle_ttl_s": 10})
    f = _fleet(2, FixedCache())
    pol.decide(_sreq("a", None), f)
    f.now = 11.0
    pol.decide(_sreq("b", None), f)  # a expired first: both instances empty, b goes RR
    assert sum(pol.open_sessions.values()) == 1 and "a" not in pol.home


def test_session_ttl_keeps_a_session_until_idle_then_balances() -> None:
    pol = get_policy("session_ttl", {"ttl_s": 60})
    f = _fleet(2, FixedCache(), num_requests=[0, 5])
    assert pol.decide(_sreq("a"), f).prefill == 0
    f = _fleet(2, FixedCache(), num_requests=[7, 0])
    f.now = 59.0
    d = pol.decide(_sreq("a"), f)
    assert (d.prefill, d.reason) == (0, "affinity")
    f.now = 120.0  # idle 61 s > 60
    d = pol.decide(_sreq("a"), f)
    assert (d.prefill, d.reason) == (1, "expired")
