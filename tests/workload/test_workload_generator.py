"""The agentic generator: the target shares, presets, closed-loop structure, parameters."""

from __future__ import annotations

import pytest

from agentic_kvc.workload import PRESETS, synthesize, workload_stats
from agentic_kvc.workload.stats import unlimited_cache_hits


@pytest.fixture(scope="module")
def default_stats() -> dict:
    return workload_stats(synthesize("agentic-coding", sessions=3000, seed=0))


def test_default_preset_reproduces_the_agentic_shares(default_stats: dict) -> None:
    s = default_stats
    # ~55% cold first turns averaging ~17.7k new tokens
    assert s["first_turn_share"] == pytest.approx(0.55, abs=0.03)
    assert s["first_turn_new_tokens_mean"] == pytest.approx(17_700, rel=0.06)
    # ~22% with > 90% cache hit needing ~1.3k new tokens
    assert s["high_hit_share"] == pytest.approx(0.22, abs=0.03)
    assert s["high_hit_new_tokens_mean"] == pytest.approx(1_300, rel=0.15)
    # ~92% of HEAVY (>= 20k new tokens) are first turns; HEAVY ~20% of all
    assert s["heavy_first_turn_share"] == pytest.approx(0.92, abs=0.04)
    assert s["classes"]["HEAVY"]["share"] == pytest.approx(0.20, abs=0.04)


def test_sessions_grow_their_context_and_share_the_system_prompt() -> None:
    wl = synthesize("agentic-coding", sessions=40, seed=3)
    first_blocks = {s.requests[0].blocks[0] for s in wl.sessions}
    assert len(first_blocks) == 1  # one shared system prompt block
    for sess in wl.sessions:
        for prev, cur in zip(sess.requests, sess.requests[1:], strict=False):
            assert cur.blocks[: len(prev.blocks)] == prev.blocks  # append-only context
            assert cur.blocks[len(prev.blocks)].tokens == prev.output_tokens  # the answer
            assert cur.parent_id == prev.request_id and cur.turn == prev.turn + 1
            assert cur.think_s > 0 and cur.arrival_s > prev.arrival_s + cur.think_s
    starts = [s.start_s for s in wl.sessions]
    assert starts == sorted(starts) and starts[0] == 0.0 and starts[-1] > 0


def test_first_sessions_do_not_depend_on_the_total() -> None:
    small = synthesize("agentic-coding", sessions=5, seed=11)
    large = synthesize("agentic-coding", sessions=50, seed=11)
    assert large.sessions[:5] == small.sessions


def test_presets_differ_in_the_expected_direction() -> None:
    assert set(PRESETS) >= {"agentic-coding", "chat", "heavy-tail"}
    chat = workload_stats(synthesize("chat", sessions=300, seed=1))
    agent = workload_stats(synthesize("agentic-coding", sessions=300, seed=1))
    heavy = workload_stats(synthesize("heavy-tail", sessions=300, seed=1))
    assert chat["input_tokens"]["p50"] < agent["input_tokens"]["p50"] / 3
    assert chat["turns_per_session"]["mean"] > agent["turns_per_session"]["mean"]
    assert chat["classes"]["HEAVY"]["share"] < 0.02
    assert heavy["input_tokens"]["p99"] > agent["input_tokens"]["p99"]


def test_params_override_and_errors() -> None:
    wl = synthesize("agentic-coding", sessions=30, seed=0, params={"continue_prob": 0.0})
    assert all(len(s.requests) == 1 for s in wl.sessions)
    wl = synthesize("agentic-coding", sessions=5, seed=0, params={"system_prompt_tokens": 0})
    hits = unlimited_cache_hits(wl.requests())
    assert hits[0] == 0
    with pytest.raises(ValueError, match=r"params\.continue_prb"):
        synthesize("agentic-coding", sessions=2, params={"continue_prb": 0.5})
    with pytest.raises(ValueError, match="continue_prob"):
        synthesize("agentic-coding", sessions=2, params={"continue_prob": 1.5})
    with pytest.raises(ValueError, match="unknown generator preset"):
        synthesize("nope", sessions=2)


def test_agentic_long_grows_contexts_past_50k_with_high_reuse() -> None:
    wl = synthesize("agentic-long", sessions=400, seed=0)
    s = workload_stats(wl)
    reqs = wl.requests()
    later = sorted(r.input_tokens for r in reqs if r.turn >= 5)
    # contexts grow past 50k: the median later-turn prompt is above it, the median prompt near it
    assert later[len(later) // 2] > 50_000
    assert 38_000 < s["input_tokens"]["p50"] < 60_000
    assert s["input_tokens"]["p90"] > 80_000
    assert s["input_tokens"]["max"] <= 160_000  # sessions end at max_context_tokens
    # high reuse: most of each prompt is the previous context
    assert s["prefix_hit_share_of_input_tokens"] > 0.88
    assert s["high_hit_share"] > 0.7
    assert s["turns_per_session"]["mean"] > 10
    # tool pauses between turns, and only the rare first turn is cold
    assert s["think_s"]["p50"] > 1.0
    assert s["first_turn_share"] < 0.12
    agent = workload_stats(synthesize("agentic-coding", sessions=400, seed=0))
    assert s["input_tokens"]["p50"] > 2 * agent["input_tokens"]["p50"]
    assert s["prefix_hit_share_of_input_tokens"] > agent["prefix_hit_share_of_input_tokens"] + 0.3
