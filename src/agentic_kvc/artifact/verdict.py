"""Expected vs obtained: the verdict of one claim.

- not reproduced: a comparing claim whose 95% paired interval does not lie on the claimed side
  of 0 (for a claimed "no difference", whose interval excludes 0), or an obtained value further
  from the reference than the tolerance allows;
- reproduced: on the claimed side and equal to the reference at the precision REPORT.md prints
  (0.1 percentage point);
- within tolerance: on the claimed side, off the reference by no more than the tolerance;
- direction only: the claim's tolerance is its direction (real engines on a shared machine move
  several fold with load, so only the sign is claimed).
"""

from __future__ import annotations

from typing import Any

REPRODUCED = "reproduced"
WITHIN = "within tolerance"
DIRECTION_ONLY = "direction only"
NOT_REPRODUCED = "not reproduced"
VERDICTS = (REPRODUCED, WITHIN, DIRECTION_ONLY, NOT_REPRODUCED)
PASSING = (REPRODUCED, WITHIN, DIRECTION_ONLY)

# Half of the last digit REPORT.md prints a relative difference with (-44.9%).
PRECISION = 0.0005


def interval_holds(direction: str, lo: float, hi: float) -> bool:
    """Whether the interval [lo, hi] of candidate / baseline - 1 supports the claimed direction."""
    if lo != lo or hi != hi:  # NaN: no interval, nothing supports the claim
        return False
    if direction == "lower":
        return hi < 0
    if direction == "higher":
        return lo > 0
    if direction == "none":
        return lo <= 0 <= hi
    raise ValueError(f"unknown direction {direction!r}: lower, higher or none")


def allowed(reference: float, tolerance: dict[str, Any]) -> float:
    kind = tolerance["kind"]
    if kind == "absolute":
        return float(tolerance["value"])
    if kind == "relative":
        return float(tolerance["value"]) * abs(reference)
    raise ValueError(f"tolerance kind {kind!r} has no width")


def verdict(
    obtained: float,
    lo: float,
    hi: float,
    reference: float,
    direction: str,
    tolerance: dict[str, Any],
) -> tuple[str, str]:
    """(verdict, one-line reason)."""
    interval = f"[{lo * 100:+.1f}, {hi * 100:+.1f}]"
    if not interval_holds(direction, lo, hi):
        want = {"lower": "below 0", "higher": "above 0", "none": "containing 0"}[direction]
        return NOT_REPRODUCED, f"interval {interval} is not {want} (claimed: {direction})"
    if tolerance["kind"] == "direction":
        return DIRECTION_ONLY, f"interval {interval} on the claimed side; only the sign is claimed"
    off = abs(obtained - reference)
    width = allowed(reference, tolerance)
    gap = f"{obtained * 100:+.1f}% vs reference {reference * 100:+.1f}%"
    if off <= PRECISION:
        return REPRODUCED, f"{gap}, interval {interval}"
    if off <= width:
        return WITHIN, f"{gap}, within {width * 100:.1f} points"
    return NOT_REPRODUCED, f"{gap}: off by more than {width * 100:.1f} points"
