"""Issue 16's cost levers that must not change what a policy or a record sees.

- `EstimatedPrefixIndex.matched_tokens_at` (one instance) answers what `matched_tokens` (all
  of them) answers, through LRU eviction and TTL expiry;
- `FleetView.cached_tokens_on` equals `cached_tokens(...)[i]` (capped the same way);
- receipts share one key string per instance index and keep their keys and values;
- a policy that declares `uses_cache_view = False` runs without a router prefix index.
"""

from __future__ import annotations

from typing import Any

from fixed_profile import PROFILE
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex
from agentic_kvc.config import load_config
from agentic_kvc.policy import RequestView
from agentic_kvc.policy.base import Decision, FleetView, InstanceView
from agentic_kvc.policy.round_robin import RoundRobin
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload


def prompt(head: int, length: int, tail: int) -> list[int]:
    """Chain-like hashes (a hash fixes its whole prefix): a shared head of `head` blocks, then
    a branch named by `tail` and by where it starts."""
    branch = (tail + 1) * 1_000_000 + head * 1_000
    return [10_000 + j for j in range(head)] + [branch + j for j in range(length)]


records = st.lists(
    st.tuples(
        st.integers(0, 3),  # instance
        st.integers(0, 6),  # shared head blocks
        st.integers(0, 8),  # branch blocks
        st.integers(0, 3),  # branch
        st.floats(0, 5),  # time step
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    recs=records,
    capacity=st.sampled_from([None, 4, 9, 30]),
    ttl=st.sampled_from([None, 2.0, 6.0]),
    query=st.tuples(st.integers(0, 6), st.integers(0, 8), st.integers(0, 3)),
)
def test_one_instance_match_equals_the_fleet_match(
    recs: list[tuple[int, int, int, int, float]],
    capacity: int | None,
    ttl: float | None,
    query: tuple[int, int, int],
) -> None:
    idx = EstimatedPrefixIndex(4, capacity, ttl)
    now = 0.0
    for inst, head, length, tail, dt in recs:
        now += dt
        idx.record(inst, prompt(head, length, tail), now)
    idx.advance(now + 1.0)
    hashes = prompt(*query)
    req = RequestView("q", "s", 0, len(hashes) * 16 + 3, 1, hashes, 16)
    every = idx.matched_tokens(req, 6)  # two instances it never saw
    assert [idx.matched_tokens_at(req, i) for i in range(6)] == every
    # Through the fleet view, capped at input_tokens - 1 as the full list is.
    fleet = FleetView([InstanceView(i) for i in range(6)], cache=idx)
    assert [fleet.cached_tokens_on(req, i) for i in range(6)] == fleet.cached_tokens(req)
    short = RequestView("q2", "s", 0, 20, 1, hashes, 16)
    fresh = FleetView([InstanceView(i) for i in range(6)], cache=idx)
    one = [fresh.cached_tokens_on(short, i) for i in range(6)]
    assert one == fresh.cached_tokens(short)
    assert max(one) <= 19


def test_receipts_share_key_strings_and_keep_their_content() -> None:
    scores: dict[int, Any] = {0: 5, 7: {"a": 1}, 300: 2.5}
    r1 = Decision(0, 0, "WARM", "x", scores=scores).receipt()["scores"]
    r2 = Decision(1, 1, "WARM", "y", scores=dict(scores)).receipt()["scores"]
    assert r1 == {"0": 5, "7": {"a": 1}, "300": 2.5}
    assert all(a is b for a, b in zip(r1, r2, strict=True))  # one string per index
    odd = Decision(0, 0, "WARM", "x", scores={True: 1, -1: 2, "k": 3}).receipt()["scores"]
    assert odd == {"True": 1, "-1": 2, "k": 3}  # anything else is str() as before


def _fleet() -> SimFleet:
    config = load_config(
        {
            "backend": "sim",
            "seed": 3,
            "workload": {"generator": {"preset": "agentic-coding", "sessions": 8}},
            "fleet": {"instances": 3, "kv_cache_tokens": 400_000},
            "policy": {"name": "round_robin"},
        },
        [],
    )
    return SimFleet(config, load_workload(config.workload, config.seed), PROFILE)


def test_a_policy_that_never_reads_the_cache_view_runs_without_an_index(monkeypatch) -> None:
    with_index = _fleet()
    assert with_index.state.cache is not None
    with_index.run()
    # round_robin reads the view for its receipt's predicted hit: on a warm session it is > 0.
    assert any(r.predicted_cached_tokens for r in with_index.records)

    monkeypatch.setattr(RoundRobin, "uses_cache_view", False)
    without = _fleet()
    assert without.state.cache is None
    without.run()
    assert [r.prefill_instance for r in without.records] == [
        r.prefill_instance for r in with_index.records
    ]
    assert all(r.predicted_cached_tokens == 0 for r in without.records)
    assert all(r.t_done is not None and r.error is None for r in without.records)
