"""predicted_ttft: the fit recovers a known step cost, and decisions follow the prediction."""

from __future__ import annotations

import math

import pytest

from agentic_kvc.policy import get_policy
from agentic_kvc.policy.base import InstanceView
from agentic_kvc.policy.predicted_ttft import fit_step_cost, fitted_cost, predict_ttft_s
from agentic_kvc.profiles.cost import AffineStepCost
from tests.policy.policy_helpers import fleet, req

H20 = ("h20", "qwen3-coder-30b-a3b")


def test_fit_recovers_an_affine_step_cost() -> None:
    truth = AffineStepCost(
        overhead_s=0.01,
        per_token_s=5e-5,
        per_attn_pair_s=3e-9,
        per_decode_seq_s=2e-4,
        per_kv_token_s=1e-8,
    )
    got = fit_step_cost(truth)
    for field in ("overhead_s", "per_token_s", "per_attn_pair_s", "per_decode_seq_s"):
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=1e-6), field
    assert got.per_kv_token_s == pytest.approx(truth.per_kv_token_s, rel=1e-6)


def test_fitted_profile_is_close_to_the_profile_it_fits() -> None:
    from agentic_kvc.profiles import get_profile

    prof, fit = get_profile(*H20).cost, fitted_cost(*H20)
    for chunk, ctx, dec in [(8192, 0, 0), (4096, 30_000, 16), (512, 100_000, 48)]:
        t = prof.step_s([(chunk, ctx)], dec, dec * 8000)
        assert fit.step_s([(chunk, ctx)], dec, dec * 8000) == pytest.approx(t, rel=0.25)


def test_prediction_counts_steps_tokens_and_attention() -> None:
    cost = AffineStepCost(0.01, 1e-4, 1e-8, 1e-3, 0.0)
    inst = InstanceView(index=0, pending_prefill_tokens=3000, decode_requests=2)
    got = predict_ttft_s(
        inst, uncached=6000, cached=1000, queued_context=500, cost=cost, budget=4096
    )
    steps = math.ceil(9000 / (4096 - 2))
    want = steps * (0.01 + 2 * (1e-3 + 1e-4)) + 1e-4 * 9000
    want += 1e-8 * (3000 * 500 + 6000 * (1000 + 3000))
    assert got == pytest.approx(want)


def test_goes_to_the_cache_while_its_queue_is_cheaper_than_recomputing() -> None:
    policy = get_policy("predicted_ttft")
    r = req(input_tokens=40_000)
    view = fleet(3, cached={1: 36_000}, num_requests=[0, 1, 0], pending_prefill_tokens=[0, 0, 0])
    d = policy.decide(r, view)
    assert d.prefill == 1 and d.reason == "min_predicted_ttft"
    assert set(d.scores) == {0, 1, 2} and d.scores[1] < d.scores[0]


def test_leaves_the_cache_when_its_queue_costs_more_than_recomputing() -> None:
    policy = get_policy("predicted_ttft")
    r = req(input_tokens=20_000)
    # Instance 1 holds 18k tokens but has 200k tokens of prefill queued: recomputing 20k on
    # an idle instance is predicted sooner (the scores say by how much).
    view = fleet(
        3, cached={1: 18_000}, num_requests=[0, 6, 0], pending_prefill_tokens=[0, 200_000, 0]
    )
    d = policy.decide(r, view)
    assert d.prefill in (0, 2)
    assert d.scores[d.prefill] < d.scores[1]


def test_decode_load_breaks_an_otherwise_equal_choice() -> None:
    policy = get_policy("predicted_ttft")
    view = fleet(2, decode_requests=[40, 0], decode_tokens=[40 * 20_000, 0])
    assert policy.decide(req(input_tokens=8000), view).prefill == 1


def _chat_turn_view(home_cached: int) -> tuple:
    """A session's later chat turn (2,400 tokens, 300 out): its home, instance 0, holds
    `home_cached` tokens of it and runs 12 decodes; instance 1 is idle."""
    r = req(input_tokens=2400, output_tokens=300, session="chat-1")
    view = fleet(
        2,
        cached={0: home_cached} if home_cached else {},
        affinity={"chat-1": 0},
        decode_requests=[12, 0],
        decode_tokens=[12 * 3000, 0],
    )
    return r, view


def test_placement_keeps_a_later_turn_on_its_cache_where_always_moves_it() -> None:
    # The decode term (300 tokens x the step with 12 more decodes) outweighs recomputing 2,200
    # tokens: `always` leaves the cache; `placement` places a turn on its cache by TTFT alone.
    r, view = _chat_turn_view(home_cached=2200)
    assert get_policy("predicted_ttft", {"decode_term": "always"}).decide(r, view).prefill == 1
    r, view = _chat_turn_view(home_cached=2200)
    assert get_policy("predicted_ttft", {"decode_term": "placement"}).decide(r, view).prefill == 0


def test_placement_still_balances_decodes_when_the_session_has_no_cache_of_its_own() -> None:
    # Its cache was evicted (home holds no more than the other): a placement, decode term on.
    r, view = _chat_turn_view(home_cached=0)
    assert get_policy("predicted_ttft", {"decode_term": "placement"}).decide(r, view).prefill == 1
    # A new session whose shared system prompt sits only on the decode-loaded instance.
    policy = get_policy("predicted_ttft", {"decode_term": "placement"})
    r = req(input_tokens=900, output_tokens=300, session="new", turn=0)
    view = fleet(2, cached={0: 600}, decode_requests=[12, 0], decode_tokens=[36_000, 0])
    assert policy.decide(r, view).prefill == 1
    # Without the decode term the system prompt's hit wins: the piling the term prevents.
    r = req(input_tokens=900, output_tokens=300, session="new", turn=0)
    view = fleet(2, cached={0: 600}, decode_requests=[12, 0], decode_tokens=[36_000, 0])
    assert get_policy("predicted_ttft", {"objective": "ttft"}).decide(r, view).prefill == 0


def test_recompute_stall_keeps_a_turn_off_a_busy_instance_that_would_recompute_it() -> None:
    # Home (0) holds 30k of a 32k prompt behind a 60k-token queue; instance 1 is free of
    # prefill but runs 40 decodes. For the request alone moving is faster (the queue costs
    # more than recomputing 30k), but the recompute would stall instance 1's 40 decodes.
    def view() -> tuple:
        r = req(input_tokens=32_000, output_tokens=200, session="s1")
        v = fleet(
            2,
            cached={0: 30_000},
            affinity={"s1": 0},
            pending_prefill_tokens=[60_000, 0],
            decode_requests=[0, 40],
            decode_tokens=[0, 40 * 8000],
        )
        return r, v

    assert get_policy("predicted_ttft", {"recompute_stall": False}).decide(*view()).prefill == 1
    assert get_policy("predicted_ttft").decide(*view()).prefill == 0
    # With nothing decoding on the other instance, the recompute stalls nobody: it moves.
    r, v = view()
    v.instances[1].decode_requests = v.instances[1].decode_tokens = 0
    assert get_policy("predicted_ttft").decide(r, v).prefill == 1
