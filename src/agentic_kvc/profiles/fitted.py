"""A calibrated CPU profile with its serving fit applied (calibrate/serving_fit.py fits it).

The serving fit's terms change a linear (CPU) profile in three ways: one scale on every step
cost, a contended slowdown on top for the part of a step that overlaps another instance's
step (a fleet with no spare core), and a background term per runnable thread of the host's
other processes. `load_cpu_profile` applies the first two and sets the third
(`apply_fit`, `with_background`); the simulator charges the third on the run's recorded
neighbours (`under_background`, sim/fleet.py). The fitting itself (replays, losses, search)
lives in calibrate/; this module is what a simulation needs of it at run time.
"""

from __future__ import annotations

from dataclasses import replace

from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.profiles.linear import LinearStepCost

# Forms of the background term: the profile field each fills.
BACKGROUND_FIELDS = {
    "slowdown": "background_slowdown",  # every step costs more per runnable thread
    "delay": "background_delay_s",  # each request reaches its engine later per runnable thread
}


def scaled_cost(cost: LinearStepCost, prefill: float, step: float) -> LinearStepCost:
    """`cost` with its prefill terms (per token, attention, per prefill sequence) times
    `prefill` and its per-step overhead and decode terms times `step`."""
    p, s = prefill, step
    return LinearStepCost(
        overhead_s=cost.overhead_s * s,
        per_token_s=cost.per_token_s * p,
        per_attn_pair_s=cost.per_attn_pair_s * p,
        per_prefill_seq_s=cost.per_prefill_seq_s * p,
        per_decode_seq_s=cost.per_decode_seq_s * s,
        per_kv_token_s=cost.per_kv_token_s * s,
    )


def apply_fit(
    base: EngineProfile, scale: float, contended: tuple[float, float] | None
) -> EngineProfile:
    """`base` (a linear CPU profile) with the serving fit's scale and contended slowdown."""
    assert isinstance(base.cost, LinearStepCost)
    cost = scaled_cost(base.cost, scale, scale)
    slow = scaled_cost(cost, *contended) if contended else None
    return replace(base, cost=cost, contended_cost=slow)


def with_background(profile: EngineProfile, form: str, value: float) -> EngineProfile:
    """`profile` with a background term of `form` ("slowdown" or "delay") set to `value`."""
    return replace(profile, **{BACKGROUND_FIELDS[form]: value})


def under_background(profile: EngineProfile, threads: float) -> EngineProfile:
    """`profile` beside `threads` runnable threads of other processes: every step cost
    (contended ones too) times 1 + background_slowdown * threads. Unchanged without the term."""
    if not (profile.background_slowdown and threads):
        return profile
    factor = 1.0 + profile.background_slowdown * threads
    slow = profile.contended_cost
    assert isinstance(profile.cost, LinearStepCost)
    assert slow is None or isinstance(slow, LinearStepCost)
    return replace(
        profile,
        cost=scaled_cost(profile.cost, factor, factor),
        contended_cost=None if slow is None else scaled_cost(slow, factor, factor),
    )
