"""Elastic offload's two bounds (always / never offload), which the elastic study compares."""

from __future__ import annotations

import pytest
from policy_helpers import fleet, req

from agentic_kvc.policy.registry import get_policy


def _busy_p_fleet():
    # D = 0 (session affinity) decoding; the peers are busier than D, so the elastic rule
    # colocates ("p_overloaded") while "always" must still offload to the least-loaded peer.
    return fleet(
        3,
        affinity={"s": 0},
        decode_tokens=[30_000, 0, 0],
        decode_requests=[3, 0, 0],
        num_requests=[3, 1, 1],
        pending_prefill_tokens=[0, 80_000, 120_000],
    )


@pytest.mark.parametrize(
    "offload,expect", [("elastic", (0, 0)), ("always", (1, 0)), ("never", (0, 0))]
)
def test_bounds_override_the_rule_for_heavy(offload: str, expect: tuple[int, int]) -> None:
    d = get_policy("elastic", {"offload": offload}).decide(req(60_000), _busy_p_fleet())
    assert (d.prefill, d.decode) == expect
    assert d.reason == ("p_overloaded" if offload == "elastic" else "forced")


def test_bounds_leave_non_heavy_requests_alone() -> None:
    d = get_policy("elastic", {"offload": "always"}).decide(req(3_000), _busy_p_fleet())
    assert (d.prefill, d.decode, d.reason) == (0, 0, "below_threshold")
