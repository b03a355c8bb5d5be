"""The router's fleet snapshot kept between decisions, and the policies' cheap argmin and
receipts (issue 16): same answers as recomputing everything per request."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import FixedCache

from agentic_kvc.policy import Decision, FleetView, InstanceView, RequestView, get_policy
from agentic_kvc.policy.common import (
    RoundRobinTie,
    cache_lb_pick,
    colocated_candidates,
    lmetric_pick,
    uncached_tokens,
)
from agentic_kvc.policy.fleet import RouterState


def _filtered(instances: list[InstanceView]) -> list[int]:
    return [i.index for i in instances if i.healthy and i.can_prefill and i.can_decode]


def test_colocated_candidates_follow_health_changes() -> None:
    state = RouterState(5, roles=["combined", "prefill", "both", "decode", "combined"])
    first = colocated_candidates(state.view(0.0))
    assert [i.index for i in first] == [0, 2, 4]
    assert colocated_candidates(state.view(1.0)) is first  # kept, not rebuilt per request
    state.set_healthy(2, False)
    assert [i.index for i in colocated_candidates(state.view(2.0))] == [0, 4]
    state.set_healthy(2, True)
    assert [i.index for i in colocated_candidates(state.view(3.0))] == [0, 2, 4]


def test_update_scrapes_is_update_scrape_per_instance() -> None:
    one, many = RouterState(3), RouterState(3)
    rows = [(2, 0, 0.5), (None, None, None), (0, 7, 0.0)]
    for i, (r, w, kv) in enumerate(rows):
        one.update_scrape(i, 4.0, r, w, kv)
    many.update_scrapes(4.0, *zip(*rows, strict=True))
    a, b = one.view(6.5), many.view(6.5)
    assert [dataclasses.asdict(i) for i in a.instances] == [
        dataclasses.asdict(i) for i in b.instances
    ]
    assert all(i.scrape_age_s == 2.5 for i in b.instances)


def test_receipt_keys_are_str_of_the_index() -> None:
    scores = {0: 1, 7: {"x": 1}, 5000: 3, 70_000: 4}
    got = Decision(0, 0, "WARM", "r", scores=scores).receipt()["scores"]
    assert list(got.items()) == [(str(k), v) for k, v in scores.items()]
    again = Decision(0, 0, "WARM", "r", scores={7: 0}).receipt()["scores"]
    assert next(iter(again)) is next(k for k in got if k == "7")  # one shared string


def _reference_pick(cands, score, unc, tie: RoundRobinTie, n: int) -> InstanceView:  # type: ignore[no-untyped-def]
    """The full-key argmin the policies used before (a key tuple per candidate)."""
    start = tie.counter % n
    return min(cands, key=lambda i: (score(i), unc[i.index], i.num_requests, (i.index - start) % n))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**32), counter=st.integers(0, 100))
def test_pick_matches_the_full_key_argmin(n: int, seed: int, counter: int) -> None:
    rng = random.Random(seed)
    spread = rng.choice([0, 1, 3, 1000])  # small spreads: many ties at every key level
    insts = [
        InstanceView(
            index=i,
            num_requests=rng.randint(0, spread),
            pending_prefill_tokens=rng.randint(0, spread),
            decode_tokens=rng.randint(0, spread),
        )
        for i in range(n)
    ]
    cands = [i for i in insts if rng.random() < 0.8] or insts[:1]
    unc = [rng.randint(0, spread) for _ in range(n)]
    tie = RoundRobinTie()
    tie.counter = counter
    best, scores = lmetric_pick(cands, unc, tie, n)
    ref = _reference_pick(
        cands, lambda i: (i.pending_prefill_tokens + unc[i.index]) * i.num_requests, unc, tie, n
    )
    assert best is ref and list(scores) == [i.index for i in cands]
    best, scores = cache_lb_pick(cands, unc, tie, n)
    assert best is _reference_pick(cands, lambda i: i.ongoing_tokens + unc[i.index], unc, tie, n)
    assert scores == {i.index: i.ongoing_tokens + unc[i.index] for i in cands}


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_policies_decide_the_same_with_or_without_the_kept_snapshot(seed: int) -> None:
    """A FleetView with the router's kept candidates and one without decide alike (the
    affinity owner found by position or by search, unhealthy instances skipped)."""
    rng = random.Random(seed)
    n = rng.randint(1, 24)
    insts = [
        InstanceView(
            index=i,
            healthy=rng.random() < 0.8,
            num_requests=rng.randint(0, 6),
            pending_prefill_tokens=rng.choice([0, rng.randint(0, 30_000)]),
        )
        for i in range(n)
    ]
    if not any(i.healthy for i in insts):
        insts[0].healthy = True
    tokens = rng.randint(1, 40_000)
    cached = {i: rng.choice([0, tokens // 2, tokens]) for i in range(n)}
    affinity = {"s": rng.randrange(n)}
    request = RequestView("r", "s", 1, tokens, 8)
    for name, params in [
        ("unified", {}),
        ("unified", {"overload_test": "requests"}),
        ("lmetric", {}),
        ("round_robin", {}),
    ]:
        pols = get_policy(name, params), get_policy(name, params)
        for _ in range(3):
            views = [
                FleetView(insts, FixedCache(cached), affinity, colocated=colo)
                for colo in (None, [i for i in insts if i.index in _filtered(insts)])
            ]
            a, b = (p.decide(request, v) for p, v in zip(pols, views, strict=True))
            assert a.receipt() == b.receipt()
    assert uncached_tokens(request, [0, tokens, tokens + 5]) == [tokens, 0, 0]
