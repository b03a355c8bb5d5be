"""RouterState bookkeeping: every hook releases exactly what admit added."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.cache.chain_index import ChainedPrefixIndex
from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex
from agentic_kvc.policy import Decision, RequestView
from agentic_kvc.policy.fleet import RouterState

FIELDS = ("num_requests", "pending_prefill_tokens", "decode_requests", "decode_tokens")


def snapshot(state: RouterState) -> list[tuple[int, ...]]:
    return [tuple(getattr(i, f) for f in FIELDS) for i in state.instances]


def request(k: int, tokens: int = 1000, session: str | None = "s") -> RequestView:
    return RequestView(f"r{k}", session, 1, tokens, 8, block_hashes=tuple(range(tokens // 16)))


def test_colocated_lifecycle() -> None:
    st_ = RouterState(2)
    t = st_.admit(request(0), Decision(1, 1, "WARM", "x", predicted_cached_tokens=400))
    assert snapshot(st_)[1] == (1, 600, 0, 0)
    st_.first_token(t)
    assert snapshot(st_)[1] == (1, 0, 1, 1000)
    st_.first_token(t)  # idempotent
    st_.finish(t)
    st_.finish(t)
    assert snapshot(st_) == [(0, 0, 0, 0)] * 2


def test_pd_lifecycle_moves_the_request() -> None:
    st_ = RouterState(2)
    t = st_.admit(request(0), Decision(0, 1, "HEAVY_P2P", "x"))
    assert snapshot(st_) == [(1, 1000, 0, 0), (0, 0, 0, 0)]
    st_.prefill_done(t)
    assert snapshot(st_) == [(0, 0, 0, 0), (1, 0, 1, 1000)]
    st_.first_token(t)
    st_.finish(t)
    assert snapshot(st_) == [(0, 0, 0, 0)] * 2


def test_failure_before_first_token_releases_prefill() -> None:
    st_ = RouterState(3)
    t = st_.admit(request(0), Decision(0, 2, "HEAVY_P2P", "x"))
    st_.finish(t)
    assert snapshot(st_) == [(0, 0, 0, 0)] * 3


def test_admit_records_affinity_turns_and_cache() -> None:
    cache = EstimatedPrefixIndex(3)
    st_ = RouterState(3, cache=cache)
    r = request(0, tokens=160)
    st_.admit(r, Decision(0, 2, "HEAVY_P2P", "x"), now=1.0)
    assert st_.affinity["s"] == 2 and st_.session_turns["s"] == 1
    assert cache.matched_tokens(r, 3) == [160, 0, 160]
    exact = RouterState(3, cache=EstimatedPrefixIndex(3), record_on_route=False)
    exact.admit(r, Decision(0, 0, "WARM", "x"))
    assert exact.cache.matched_tokens(r, 3) == [0, 0, 0]  # type: ignore[union-attr]


def test_view_advances_a_ttl_cache() -> None:
    cache = EstimatedPrefixIndex(1, ttl_s=10)
    st_ = RouterState(1, cache=cache)
    r = request(0, tokens=32)
    st_.admit(r, Decision(0, 0, "WARM", "x"), now=0.0)
    assert st_.view(5.0).cached_tokens(r) == [31]  # capped at input - 1
    assert st_.view(11.0).cached_tokens(dataclasses.replace(r, request_id="r1")) == [0]


@settings(max_examples=50, deadline=None)
@given(
    plan=st.lists(
        st.tuples(
            st.integers(0, 3),  # prefill instance
            st.integers(0, 3),  # decode instance
            st.integers(1, 50_000),  # prompt tokens
            st.integers(0, 50_000),  # predicted cached
            st.sampled_from(["finish_early", "first_token", "prefill_done"]),
        ),
        max_size=30,
    ),
    order=st.randoms(use_true_random=False),
)
def test_any_interleaving_returns_to_zero(plan, order) -> None:
    st_ = RouterState(4)
    tickets = []
    for k, (p, d, tokens, cached, path) in enumerate(plan):
        t = st_.admit(request(k, tokens), Decision(p, d, "X", "x", predicted_cached_tokens=cached))
        tickets.append((t, path))
    order.shuffle(tickets)
    for t, path in tickets:
        if path == "prefill_done":
            st_.prefill_done(t)
        if path != "finish_early":
            st_.first_token(t)
        assert all(v >= 0 for row in snapshot(st_) for v in row)
        st_.finish(t)
    assert snapshot(st_) == [(0, 0, 0, 0)] * 4


@pytest.mark.parametrize("n", [1, 5])
def test_scrape_age(n: int) -> None:
    st_ = RouterState(n)
    st_.update_scrape(0, now=2.0, running=3, waiting=1, kv_usage=0.5)
    v = st_.view(now=4.5)
    assert v.instances[0].scrape_age_s == pytest.approx(2.5)
    assert v.instances[0].engine_running == 3
    assert all(i.scrape_age_s is None for i in v.instances[1:])


def test_max_sessions_forgets_the_least_recently_routed() -> None:
    st_ = RouterState(2, max_sessions=2)
    for k, sid in enumerate(["a", "b", "a", "c"]):  # "a" routed again before "c" arrives
        st_.admit(request(k, session=sid), Decision(k % 2, k % 2, "WARM", "x"))
    assert list(st_.affinity) == ["a", "c"]  # "b" was the least recently routed
    assert st_.affinity == {"a": 0, "c": 1}
    assert st_.session_turns == {"a": 2, "c": 1}
    st_.admit(request(9, session="b"), Decision(1, 1, "WARM", "x"))
    assert st_.session_turns == {"c": 1, "b": 1}  # "b" starts over: its count was forgotten


def test_unbounded_by_default_and_cap_validated() -> None:
    st_ = RouterState(1)
    for k in range(500):
        st_.admit(request(k, session=f"s{k}"), Decision(0, 0, "WARM", "x"))
    assert len(st_.affinity) == 500 and len(st_.session_turns) == 500
    with pytest.raises(ValueError, match="max_sessions"):
        RouterState(1, max_sessions=0)


def _lru_hashes(cache: ChainedPrefixIndex, instance: int) -> list[int]:
    return [h for h, _t in cache.lru(instance)]


def test_finish_tells_the_estimate_of_a_release_to_the_front() -> None:
    """A ticket marked `release_first` (finished sessions first, pause-aware demotion) moves
    its prompt's blocks to the front of the estimate's LRU when it finishes, not before."""
    cache = ChainedPrefixIndex(1, capacity_blocks=100)
    state = RouterState(1, cache=cache)
    a = RequestView("a", "sa", 1, 64, 8, block_hashes=(1, 2, 3, 4))
    b = RequestView("b", "sb", 1, 32, 8, block_hashes=(11, 12))
    ta = state.admit(a, Decision(0, 0, "WARM", "x"), now=1.0)
    ta.release_first = True
    tb = state.admit(b, Decision(0, 0, "WARM", "x"), now=2.0)
    assert _lru_hashes(cache, 0) == [4, 3, 2, 1, 12, 11]
    state.finish(tb, 4, now=3.0)  # not marked: nothing moves
    assert _lru_hashes(cache, 0) == [4, 3, 2, 1, 12, 11]
    state.admit(RequestView("c", "sc", 1, 16, 8, block_hashes=(21,)), Decision(0, 0, "W", "x"), 4.0)
    state.finish(ta, 4, now=5.0)
    assert _lru_hashes(cache, 0) == [4, 3, 2, 1, 12, 11, 21]  # already the oldest
    tb2 = state.admit(b, Decision(0, 0, "WARM", "x"), now=6.0)
    tb2.release_first = True
    state.finish(tb2, 4, now=7.0)
    assert _lru_hashes(cache, 0) == [12, 11, 4, 3, 2, 1, 21]


def test_a_hold_that_runs_out_demotes_unless_the_session_came_back() -> None:
    """`demote_after_s` (pause-aware placement's keep): the engine holds the KV, then demotes
    it if the session's next turn has not arrived on that instance by the deadline."""
    cache = ChainedPrefixIndex(2, capacity_blocks=100)
    state = RouterState(2, cache=cache)
    a = RequestView("a", "sa", 1, 32, 8, block_hashes=(1, 2))
    b = RequestView("b", "sb", 1, 32, 8, block_hashes=(11, 12))
    ta = state.admit(a, Decision(0, 0, "WARM", "x"), now=1.0)
    tb = state.admit(b, Decision(0, 0, "WARM", "x"), now=2.0)
    ta.demote_after_s = tb.demote_after_s = 10.0
    state.finish(ta, 4, now=3.0)  # deadline 13
    state.finish(tb, 4, now=4.0)  # deadline 14
    state.view(12.9)
    assert _lru_hashes(cache, 0) == [2, 1, 12, 11]
    # b's next turn comes back to instance 0 before its deadline: its hold ends there.
    state.admit(
        RequestView("b2", "sb", 1, 48, 8, block_hashes=(11, 12, 13)), Decision(0, 0, "W", "x"), 13.5
    )
    assert _lru_hashes(cache, 0) == [2, 1, 13, 12, 11]  # a's deadline (13) passed: demoted
    state.view(20.0)
    assert _lru_hashes(cache, 0) == [2, 1, 13, 12, 11]  # b's hold ended with its turn
    # A turn routed elsewhere does not end the hold where the KV sits.
    tc = state.admit(
        RequestView("c", "sc", 1, 16, 8, block_hashes=(31,)), Decision(0, 0, "W", "x"), 21.0
    )
    tc.demote_after_s = 5.0
    state.finish(tc, 1, now=22.0)
    state.admit(
        RequestView("c2", "sc", 1, 32, 8, block_hashes=(31, 32)), Decision(1, 1, "W", "x"), 23.0
    )
    state.view(27.5)
    assert _lru_hashes(cache, 0)[0] == 31
