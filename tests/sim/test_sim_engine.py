"""One instance's scheduler, checked against step times computed by hand."""

from __future__ import annotations

import random

import pytest

from agentic_kvc.profiles.cost import AffineStepCost
from agentic_kvc.sim.engine import Instance, Seq, Step

COST = AffineStepCost(overhead_s=1.0, per_token_s=0.01)


def make(num_blocks: int = 1000, max_seqs: int = 256, budget: int = 100, **kw: object) -> Instance:
    return Instance(0, COST, num_blocks, 16, max_seqs, budget, **kw)  # type: ignore[arg-type]


def drain(inst: Instance, now: float = 0.0) -> float:
    """Run the instance until it has nothing to do (what the fleet loop does for one)."""
    while True:
        step = inst.schedule(now)
        if step is None:
            return now
        inst.step = step
        now = step.t_end
        inst.finish_step()


def seq(uid: int, prompt: int, out: int, hashes: list[int] | None = None) -> Seq:
    return Seq(uid, prompt, out, hashes if hashes is not None else [])


@pytest.mark.parametrize("closed_form", [True, False])
def test_chunked_prefill_then_decode_timing(closed_form: bool) -> None:
    inst = make(closed_form=closed_form)
    s = seq(1, 250, 3)
    inst.submit(s)
    drain(inst)
    # Chunks of 100, 100, 50 tokens, then two one-token decode steps.
    assert s.t_first_token == pytest.approx(2.0 + 2.0 + 1.5)
    assert s.t_done == pytest.approx(5.5 + 2 * 1.01)
    assert s.generated == 3 and inst.pool.num_free == inst.pool.num_blocks


def test_token_budget_is_shared_and_running_requests_go_first() -> None:
    inst = make(budget=100)
    a, b = seq(1, 150, 2), seq(2, 30, 1)
    inst.submit(a)
    inst.submit(b)
    step = inst.schedule(0.0)
    assert step is not None and step.num_new == [100]  # a takes the whole budget
    inst.step = step
    inst.finish_step()
    step = inst.schedule(step.t_end)
    assert step is not None and [s.uid for s in step.seqs] == [1, 2]
    assert step.num_new == [50, 30]  # a's last chunk first, then b within what is left


def test_max_num_seqs_limits_the_batch() -> None:
    inst = make(max_seqs=1)
    a, b = seq(1, 10, 5), seq(2, 10, 5)
    inst.submit(a)
    inst.submit(b)
    drain(inst)
    assert a.t_done is not None and b.t_first_token is not None
    assert b.t_first_token > a.t_done  # b never ran beside a


def test_prefix_hit_is_capped_below_the_prompt_length() -> None:
    inst = make()
    h = [11, 12, 13]
    first = seq(1, 32, 1, h[:2])
    inst.submit(first)
    drain(inst)
    again = seq(2, 32, 1, h[:2])  # same 2-block prompt: only 1 block may hit (num_tokens - 1)
    longer = seq(3, 48, 1, h)
    inst.submit(again)
    drain(inst)
    inst.submit(longer)
    drain(inst)
    assert (first.cached_tokens, again.cached_tokens, longer.cached_tokens) == (0, 16, 32)
    assert inst.prefix_hits == 48 and inst.prefix_queries == 32 + 32 + 48


def test_preemption_recomputes_the_latest_admitted_request() -> None:
    # 4 blocks of 16: each request grows to 50 tokens (4 blocks); both cannot fit together.
    inst = make(num_blocks=4)
    a, b = seq(1, 30, 20), seq(2, 30, 20)
    inst.submit(a)
    inst.submit(b)
    drain(inst)
    assert inst.preemptions >= 1
    assert a.t_done is not None and b.t_done is not None and a.t_done < b.t_done
    assert inst.pool.num_free == 4


def test_closed_form_runs_match_step_by_step() -> None:
    cost = AffineStepCost(overhead_s=0.01, per_token_s=1e-4, per_kv_token_s=1e-6)
    ends = []
    for closed_form in (True, False):
        inst = Instance(0, cost, 24, 16, 8, 64, closed_form)
        seqs = [seq(i, 20 + 7 * i, 30 + 11 * i, [100 * i + j for j in range(3)]) for i in range(6)]
        for s in seqs:
            inst.submit(s)
        drain(inst)
        ends.append([(s.t_first_token, s.t_done) for s in seqs] + [inst.preemptions])
        if closed_form:
            fast_steps = inst.steps
        else:
            slow_steps = inst.steps
    assert ends[0][-1] == ends[1][-1] > 0  # the small pool forced preemptions
    for x, y in zip(ends[0][:-1], ends[1][:-1], strict=True):
        assert x == pytest.approx(y, abs=1e-9)
    assert fast_steps < slow_steps / 3  # runs of decode steps were taken in one go


def test_cut_ends_a_run_at_the_step_in_progress() -> None:
    inst = make(budget=100)
    s = seq(1, 10, 50)
    inst.submit(s)
    step = inst.schedule(0.0)
    inst.step = step
    inst.finish_step()  # prefill done, first token at 1.1
    step = inst.schedule(1.1)
    assert step is not None and step.k == 49
    inst.step = step
    assert inst.cut(1.1 + 2.5 * 1.01)
    assert step.k == 3 and step.t_end == pytest.approx(1.1 + 3 * 1.01)


def test_steps_ended_by_matches_a_binary_search() -> None:
    """`Step.ended_by` (quadratic root, then exact steps) equals the search it replaced."""
    rng = random.Random(7)
    for _ in range(2000):
        k = rng.randint(1, 400)
        step = Step(
            rng.uniform(0, 500),
            [None] * rng.randint(1, 64),
            [],
            0.0,
            k=k,  # type: ignore[list-item]
            a=rng.choice([0.0, rng.uniform(1e-4, 0.05)]),
            b=rng.choice([0.0, rng.uniform(0, 1e-7)]),
            kv0=rng.randint(0, 10**6),
        )
        t = step.t0 + rng.uniform(-0.01, step.end_of(k) - step.t0 + 0.01)
        lo, hi = 0, k - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if step.end_of(mid) <= t:
                lo = mid
            else:
                hi = mid - 1
        assert step.ended_by(t) == lo
