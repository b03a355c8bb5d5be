"""predicted_ttft `opening: lifetime`: a session's opening is priced by the load the sessions
homed on each candidate bring back (policy/session_load.py), not by the queue at this instant;
`opening: near_tie`: among candidates within the opening's own prefill of the best score, the
one with the fewest open sessions; `near_tie_ttft`: the same on the score less its decode term,
among candidates whose decode term is no larger than the best's."""

from __future__ import annotations

import dataclasses
import math

import pytest

from agentic_kvc.policy import get_policy
from agentic_kvc.policy.base import InstanceView
from agentic_kvc.policy.predicted_ttft import PredictedTTFT, predict_ttft_s
from agentic_kvc.policy.session_load import SessionLoad, stationary_wait_s
from tests.policy.policy_helpers import fleet, req


def _busy_sessions(load: SessionLoad, names: list[str], work_s: float, gap_s: float) -> None:
    """Sessions that opened at 0 and came back once at gap_s, each turn `work_s` of engine
    time and a decode of 1 s."""
    for s in names:
        load.observe(s, 0.0, work_s, span_s=1.0, decode_s=1.0, kv=2000)
    for s in names:
        load.observe(s, gap_s, work_s, span_s=1.0, decode_s=1.0, kv=2000)


def test_load_is_work_over_period_per_homed_session() -> None:
    load = SessionLoad()
    _busy_sessions(load, ["a", "b"], work_s=0.2, gap_s=4.0)
    _busy_sessions(load, ["c"], work_s=0.5, gap_s=2.0)
    rho, second, decoding, _kv = load.load(4.5, {"a": 0, "b": 0, "c": 1}, 2)
    assert rho == pytest.approx([2 * 0.2 / 4.0, 0.5 / 2.0])
    assert second == pytest.approx([2 * 0.2**2 / 4.0, 0.5**2 / 2.0])
    assert decoding == pytest.approx([2 * 1.0 / 4.0, 1.0 / 2.0])  # Little's law
    # Pollaczek-Khinchine: sum(lambda w^2) / (2 (1 - rho)); saturated: infinite
    assert stationary_wait_s(rho[1], second[1]) == pytest.approx(0.125 / (2 * 0.75))
    assert math.isinf(stationary_wait_s(1.0, 0.1))
    # the session being placed does not count against itself
    assert load.load(4.5, {"a": 0, "b": 0, "c": 1}, 2, exclude="c")[0][1] == 0.0


def test_a_finished_or_long_silent_session_stops_counting() -> None:
    load = SessionLoad()
    _busy_sessions(load, ["a", "b"], work_s=0.2, gap_s=4.0)
    homes = {"a": 0, "b": 0}
    assert load.load(5.0, homes, 1)[0][0] == pytest.approx(0.1)
    load.observe("a", 8.0, 0.2, last_turn=True)  # its finish signal
    assert "a" not in load.sessions
    assert load.load(8.5, homes, 1)[0][0] == pytest.approx(0.2 / 4.0)
    # b's last arrival was at 4 s; gaps of 4 s, so an hour later it is far past its period
    assert load.load(3600.0, homes, 1)[0][0] == 0.0


def _policy(opening: str) -> PredictedTTFT:
    return get_policy("predicted_ttft", {"opening": opening})  # type: ignore[return-value]


@pytest.mark.parametrize("opening", ["lifetime", "lifetime_replace"])
def test_opening_avoids_the_instance_whose_sessions_bring_more_work(opening: str) -> None:
    # Instance 0's queue is momentarily longer (one opening's prefill), but instance 1 is home
    # to eight sessions that each bring 0.11 s of engine time every second (rho 0.88: their
    # stationary wait, 0.40 s, outlasts instance 0's transient, about 0.23 s).
    names = [f"s{k}" for k in range(8)]
    view = fleet(2, affinity=dict.fromkeys(names, 1), pending_prefill_tokens=[3000, 0])
    view.now = 1.5
    today = get_policy("predicted_ttft").decide(req(2000, session="new"), view)
    assert today.prefill == 1  # by this turn alone: the shorter queue
    policy = _policy(opening)
    assert policy.session_load is not None
    _busy_sessions(policy.session_load, names, work_s=0.11, gap_s=1.0)
    d = policy.decide(req(2000, session="new"), view)
    assert d.prefill == 0 and d.reason == "min_predicted_ttft_lifetime"
    assert d.scores["rho"][1] == pytest.approx(0.88) and d.scores["rho"][0] == 0.0


def test_without_homed_load_an_opening_is_placed_as_today() -> None:
    view = fleet(2, pending_prefill_tokens=[3000, 0])
    d = _policy("lifetime").decide(req(2000, session="new"), view)
    today = get_policy("predicted_ttft").decide(req(2000, session="new"), view)
    assert d.prefill == today.prefill == 1
    assert d.scores[0] == pytest.approx(today.scores[0])


def test_a_later_turn_on_its_own_cache_is_not_repriced_but_feeds_the_load() -> None:
    policy = _policy("lifetime")
    view = fleet(2, cached={1: 1500}, affinity={"s": 1}, pending_prefill_tokens=[0, 4000])
    view.now = 3.0
    policy.session_load.observe("s", 0.0, 0.1)  # type: ignore[union-attr]
    d = policy.decide(req(2000, session="s"), view)
    assert d.reason == "min_predicted_ttft" and "rho" not in d.scores
    s = policy.session_load.sessions["s"]  # type: ignore[union-attr]
    assert s.gaps == 1 and s.gap_sum == pytest.approx(3.0) and s.later_work_s > 0


def test_lifetime_opening_refuses_split() -> None:
    with pytest.raises(ValueError, match="colocated"):
        get_policy("predicted_ttft", {"split": True, "opening": "lifetime"})


def _near_tie(sessions: dict[str, int], opening: str = "near_tie") -> PredictedTTFT:
    """predicted_ttft with `opening: near_tie` (or `near_tie_ttft`), the given sessions open
    (routed, no finish)."""
    policy = _policy(opening)
    assert policy.open_sessions is not None and policy.session_load is None
    for s in sessions:
        policy.open_sessions.observe(s, last_turn=False)
    return policy


# Instance 0 has 500 tokens of another opening's prefill queued (a transient far shorter than
# this 2000-token opening's own prefill) and one open session; instance 1 is idle and home to
# two. By this turn alone the opening goes to 1.
HOMES = {"a": 1, "b": 1, "d": 0}


@pytest.mark.parametrize("opening", ["near_tie", "near_tie_ttft"])
def test_near_tie_opening_goes_to_the_instance_with_fewer_open_sessions(opening: str) -> None:
    view = fleet(2, affinity=HOMES, pending_prefill_tokens=[500, 0])
    today = get_policy("predicted_ttft").decide(req(2000, session="new"), view)
    assert today.prefill == 1
    d = _near_tie(HOMES, opening).decide(req(2000, session="new"), view)
    assert d.prefill == 0 and d.reason == "near_tie_fewer_sessions"
    assert d.scores["open_sessions"] == [1, 2]
    # instance 0 is worse by this turn, but by less than the band (its own idle prefill)
    assert today.scores[1] < today.scores[0] <= today.scores[1] + d.scores["band"]


def test_near_tie_ttft_keeps_the_decode_load_out_of_the_band() -> None:
    # As above, but instance 0 (fewer open sessions) is also decoding three requests: its whole
    # score is still within the band of the best, so near_tie moves the opening there; its
    # decode term is heavier than the best's, so near_tie_ttft does not.
    view = fleet(
        2,
        affinity=HOMES,
        pending_prefill_tokens=[500, 0],
        decode_requests=[3, 0],
        decode_tokens=[6000, 0],
    )
    r = req(2000, session="new", output_tokens=64)
    loose = _near_tie(HOMES).decide(r, view)
    assert loose.prefill == 0 and loose.reason == "near_tie_fewer_sessions"
    d = _near_tie(HOMES, "near_tie_ttft").decide(r, view)
    assert d.prefill == 1 and d.reason == "min_predicted_ttft"
    assert d.scores[1] < d.scores[0] <= d.scores[1] + d.scores["band"]
    # with as much decoding on the best instance, instance 0 is a near-tie again
    view = fleet(
        2,
        affinity=HOMES,
        pending_prefill_tokens=[500, 0],
        decode_requests=[3, 3],
        decode_tokens=[6000, 6000],
    )
    d = _near_tie(HOMES, "near_tie_ttft").decide(req(2000, session="new", output_tokens=64), view)
    assert d.prefill == 0 and d.reason == "near_tie_fewer_sessions"


def test_near_tie_keeps_the_best_score_outside_the_band() -> None:
    # 6000 queued tokens on instance 0: three of this opening's prefills, not a near-tie
    view = fleet(2, affinity=HOMES, pending_prefill_tokens=[6000, 0])
    d = _near_tie(HOMES).decide(req(2000, session="new"), view)
    assert d.prefill == 1 and d.reason == "min_predicted_ttft"
    assert d.scores[0] > d.scores[1] + d.scores["band"]


def test_near_tie_leaves_a_later_turn_on_its_own_cache_as_today() -> None:
    # Session "a" holds 100 tokens on instance 1: a cache of its own, so no band applies even
    # though instance 0 would be a near-tie with fewer open sessions were it an opening.
    homes = {**HOMES, "c": 1}  # instance 1 is home to two open sessions besides "a"
    view = fleet(2, cached={1: 100}, affinity=homes, pending_prefill_tokens=[500, 0])
    d = _near_tie(homes).decide(req(2000, session="a"), view)
    today = get_policy("predicted_ttft").decide(req(2000, session="a"), view)
    assert d.prefill == today.prefill == 1
    assert d.reason == "min_predicted_ttft" and "band" not in d.scores
    assert d.scores[0] <= d.scores[1] + predicted_prefill_s(2000 - 100, 100)


def test_near_tie_a_finished_session_stops_counting() -> None:
    policy = _near_tie(HOMES)
    view = fleet(2, affinity=HOMES, pending_prefill_tokens=[500, 0])
    for s in ("a", "b"):  # the last turns of instance 1's sessions (finish signal)
        last = dataclasses.replace(req(2000, session=s), last_turn=True)
        policy.decide(last, fleet(2, cached={1: 1900}, affinity=HOMES))
    assert policy.open_sessions is not None and policy.open_sessions.ids == {"d"}
    d = policy.decide(req(2000, session="new"), view)
    assert d.prefill == 1 and d.scores["open_sessions"] == [1, 0]
    # the opening itself is open now, and the session being placed never counts against itself
    assert "new" in policy.open_sessions.ids
    homes = {**HOMES, "new": 1}
    assert policy.open_sessions.per_instance(homes, 2) == [1, 1]
    assert policy.open_sessions.per_instance(homes, 2, exclude="new") == [1, 0]


@pytest.mark.parametrize("opening", ["near_tie", "near_tie_ttft"])
def test_near_tie_opening_refuses_split(opening: str) -> None:
    with pytest.raises(ValueError, match="colocated"):
        get_policy("predicted_ttft", {"split": True, "opening": opening})


def predicted_prefill_s(uncached: int, cached: int) -> float:
    """The band's formula: a prompt's prefill on an idle instance with today's cost model."""
    p = _policy("near_tie")
    return predict_ttft_s(InstanceView(index=0), uncached, cached, 0.0, p.cost(), 8192)
