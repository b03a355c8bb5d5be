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
        (0.004, -0.04, 0.05, 0.004, "none", ABS5, REPRODUCED),
        (0.20, 0.05, 0.40, 0.20, "none", ABS5, NOT_REPRODUCED),  # claimed no difference
        (1.5, 0.7, 4.4, 2.3, "higher", {"kind": "direction"}, DIRECTION_ONLY),
        (-0.1, -0.7, 0.4, 2.3, "higher", {"kind": "direction"}, NOT_REPRODUCED),
        (0.11, 0.05, 0.2, 0.10, "higher", {"kind": "relative", "value": 0.2}, WITHIN),
        (0.13, 0.05, 0.2, 0.10, "higher", {"kind": "relative", "value": 0.2}, NOT_REPRODUCED),
    ],
)
def test_verdict(obtained, lo, hi, reference, direction, tolerance, expected) -> None:  # type: ignore[no-untyped-def]
    assert verdict(obtained, lo, hi, reference, direction, tolerance)[0] == expected


def test_nan_interval_is_not_reproduced() -> None:
    nan = float("nan")
    assert verdict(0.1, nan, nan, 0.1, "higher", ABS5)[0] == NOT_REPRODUCED
