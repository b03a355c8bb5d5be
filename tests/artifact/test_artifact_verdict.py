"""Verdict rules: the interval must lie on the claimed side; then precision and tolerance."""

from __future__ import annotations

import pytest

from agentic_kvc.artifact.verdict import (
    DIRECTION_ONLY,
    NOT_REPRODUCED,
    REPRODUCED,
    WITHIN,
    verdict,
)

ABS5 = {"kind": "absolute", "value": 0.05}


@pytest.mark.parametrize(
    ("obtained", "lo", "hi", "reference", "direction", "tolerance", "expected"),
    [
        (-0.449, -0.59, -0.31, -0.449, "lower", ABS5, REPRODUCED),
        (-0.43, -0.59, -0.31, -0.449, "lower", ABS5, WITHIN),
        (-0.30, -0.59, -0.10, -0.449, "lower", ABS5, NOT_REPRODUCED),  # outside tolerance
        (-0.449, -0.59, 0.01, -0.449, "lower", ABS5, NOT_REPRODUCED),  # interval contains 0
        (0.20, 0.05, 0.40, -0.449, "lower", ABS5, NOT_REPRODUCED),  # wrong side
        (0.004, -0.04, 0.05, 0.004, "none", ABS5, REPRODUCED),  # inside the 10% margin
        (0.20, 0.05, 0.40, 0.20, "none", ABS5, NOT_REPRODUCED),  # claimed no difference
        (1.5, 0.7, 4.4, 2.3, "higher", {"kind": "direction"}, DIRECTION_ONLY),
        (-0.1, -0.7, 0.4, 2.3, "higher", {"kind": "direction"}, NOT_REPRODUCED),
        (0.11, 0.05, 0.2, 0.10, "higher", {"kind": "relative", "value": 0.2}, WITHIN),
        (0.13, 0.05, 0.2, 0.10, "higher", {"kind": "relative", "value": 0.2}, NOT_REPRODUCED),
    ],
)
def test_verdict(obtained, lo, hi, reference, direction, tolerance, expected) -> None:  # type: ignore[no-untyped-def]
    margin = 0.10 if direction == "none" else None
    assert verdict(obtained, lo, hi, reference, direction, tolerance, margin=margin)[0] == expected


def test_no_difference_is_an_equivalence_test_that_noise_cannot_pass() -> None:
    # Contains 0, but a wide (noisy) interval leaves the margin: not reproduced.
    v, why = verdict(0.0, -0.43, 0.41, 0.0, "none", ABS5, margin=0.10)
    assert v == NOT_REPRODUCED and "equivalence margin +/-10.0%" in why
    # The same centre with a tight interval: inside the margin.
    assert verdict(0.0, -0.05, 0.06, 0.0, "none", ABS5, margin=0.10)[0] == REPRODUCED
    # Excludes 0 but stays inside the margin: equivalent (a small, real difference).
    assert verdict(0.03, 0.01, 0.05, 0.03, "none", ABS5, margin=0.10)[0] == REPRODUCED
    with pytest.raises(ValueError, match="equivalence margin"):
        verdict(0.0, -0.05, 0.06, 0.0, "none", ABS5)


def test_a_real_difference_within_the_repeats_spread_is_not_reproduced() -> None:
    direction_only = {"kind": "direction"}
    v, why = verdict(-0.22, -0.37, -0.09, -0.22, "lower", direction_only, spread=0.31)
    assert v == NOT_REPRODUCED and "within the repeats' own spread (31%" in why
    assert verdict(-0.30, -0.5, -0.12, -0.3, "lower", direction_only, spread=0.2)[0] == (
        DIRECTION_ONLY
    )


def test_a_side_with_too_many_errors_is_not_judged() -> None:
    ok = {"baseline": 0.0, "candidate": 0.01}
    assert verdict(-0.449, -0.59, -0.31, -0.449, "lower", ABS5, error_share=ok)[0] == REPRODUCED
    bad = {"baseline": 0.0, "candidate": 0.10}
    v, why = verdict(-0.449, -0.59, -0.31, -0.449, "lower", ABS5, error_share=bad)
    assert v == NOT_REPRODUCED and "candidate's runs failed 10.0%" in why
    lenient = verdict(
        -0.449, -0.59, -0.31, -0.449, "lower", ABS5, error_share=bad, max_error_share=0.2
    )
    assert lenient[0] == REPRODUCED


def test_nan_interval_is_not_reproduced() -> None:
    nan = float("nan")
    assert verdict(0.1, nan, nan, 0.1, "higher", ABS5)[0] == NOT_REPRODUCED
