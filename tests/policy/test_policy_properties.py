"""Every registered policy, any fleet: a valid, healthy, role-respecting decision (or a clear
NoHealthyInstance exactly when no placement exists)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_helpers import FixedCache

from agentic_kvc.metrics.records import ROUTE_CLASSES
from agentic_kvc.policy import FleetView, InstanceView, RequestView, get_policy, list_policies
from agentic_kvc.policy.base import NoHealthyInstance

# The package's own policies: a test module may register a toy one (tests/proxy's
# test_most_cached ignores roles on purpose), and which of those is collected first would
# otherwise decide what this file checks.
POLICIES = sorted(
    n for n, cls in list_policies().items() if cls.__module__.startswith("agentic_kvc.")
)
RECEIPT_KEYS = (
    "policy",
    "route_class",
    "reason",
    "prefill_instance",
    "decode_instance",
    "predicted_cached_tokens",
    "scores",
)


@st.composite
def fleets(draw: st.DrawFn, roles: bool) -> tuple[FleetView, RequestView]:
    """Size, request and extremes come from hypothesis; per-instance values from a seeded
    generator (drawing 64 instances field by field makes hypothesis itself the bottleneck)."""
    n = draw(st.integers(1, 64))
    rng = random.Random(draw(st.integers(0, 2**32)))
    p_unhealthy = draw(st.sampled_from([0.0, 0.5, 0.95, 1.0]))
    max_load = draw(st.sampled_from([0, 10, 200_000]))
    healthy = [rng.random() >= p_unhealthy for _ in range(n)]
    if not roles:
        healthy[rng.randrange(n)] = True  # at least one healthy instance
    kinds = ["combined", "prefill", "decode", "both"]
    insts = []
    for i in range(n):
        dreq = rng.randint(0, 64)
        insts.append(
            InstanceView(
                index=i,
                healthy=healthy[i],
                role=rng.choice(kinds) if roles else "combined",  # type: ignore[arg-type]
                num_requests=dreq + rng.randint(0, 64),
                pending_prefill_tokens=rng.randint(0, max_load),
                decode_requests=dreq,
                decode_tokens=rng.randint(0, max_load) if dreq else 0,
                kv_usage=rng.choice([None, rng.random()]),
                engine_waiting=rng.choice([None, rng.randint(0, 50)]),
                scrape_age_s=rng.choice([None, rng.uniform(0, 30)]),
            )
        )
    input_tokens = draw(st.integers(1, 150_000))
    cached = {i: rng.randint(0, input_tokens) for i in range(n) if rng.random() < 0.5}
    session = draw(st.none() | st.sampled_from(["a", "b", "c"]))
    affinity = {"a": rng.randrange(n), "b": rng.randrange(n)}
    request = RequestView(
        request_id="r", session_id=session, turn=1, input_tokens=input_tokens, output_tokens=8
    )
    return FleetView(instances=insts, cache=FixedCache(cached), affinity=affinity), request


def _check(name: str, params: dict, f: FleetView, r: RequestView) -> None:
    pol = get_policy(name, params)
    feasible = bool(f.prefill_candidates()) and bool(f.decode_candidates())
    for _ in range(2):  # a second call exercises the advanced round-robin counters
        if not feasible:
            with pytest.raises(NoHealthyInstance):
                pol.decide(r, f)
            continue
        d = pol.decide(r, f)
        p, dd = f.instances[d.prefill], f.instances[d.decode]
        assert p.healthy and dd.healthy
        assert p.can_prefill and dd.can_decode
        assert d.policy == name and d.reason
        assert d.route_class in ROUTE_CLASSES
        assert d.predicted_cached_tokens == f.cached_tokens(r)[d.prefill]
        # The route receipt: every field a record needs, scores only for instances that
        # could have been chosen, and JSON-able as records and response headers carry it.
        receipt = json.loads(json.dumps(d.receipt()))
        assert set(RECEIPT_KEYS) <= set(receipt)
        assert (receipt["policy"], receipt["reason"]) == (name, d.reason)
        assert (receipt["prefill_instance"], receipt["decode_instance"]) == (d.prefill, d.decode)
        assert all(f.instances[int(k)].healthy for k in receipt["scores"])


VARIANTS = [(n, {}) for n in POLICIES] + [
    ("adaptive", {"version": 2}),
    ("elastic", {"mode": "cost"}),
    ("llmd_weighted", {"affinity_filter": True}),
    ("dynamo_kv", {"temperature": 0.5}),
    ("unified", {"request_ceiling": None}),
]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name,params", VARIANTS, ids=[f"{n}{p or ''}" for n, p in VARIANTS])
@SETTINGS
@given(data=fleets(roles=False))
def test_any_combined_fleet_gets_a_healthy_instance(name: str, params: dict, data) -> None:
    _check(name, params, *data)


@pytest.mark.parametrize("name", POLICIES)
@SETTINGS
@given(data=fleets(roles=True))
def test_any_role_mix_is_respected(name: str, data) -> None:
    _check(name, {}, *data)
