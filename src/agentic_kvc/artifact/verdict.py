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
# What a claim's reference and obtained value are (its `unit`): a relative difference
# (candidate / baseline - 1, printed in %), or a difference in milliseconds (a finding that
# reports one, e.g. the lifecycle's PD - colocated TTFT): scale to print, suffix.
UNITS = {"relative": (100.0, "%"), "ms": (1.0, " ms")}


def fmt_value(x: float, unit: str = "relative") -> str:
    scale, suffix = UNITS[unit]
    return f"{x * scale:+.1f}{suffix}"


def fmt_interval(lo: float, hi: float, unit: str = "relative") -> str:
    scale = UNITS[unit][0]
    return f"[{lo * scale:+.1f}, {hi * scale:+.1f}]"


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
    unit: str = "relative",
) -> tuple[str, str]:
    """(verdict, one-line reason)."""
    interval = fmt_interval(lo, hi, unit)
    if not interval_holds(direction, lo, hi):
        want = {"lower": "below 0", "higher": "above 0", "none": "containing 0"}[direction]
        return NOT_REPRODUCED, f"interval {interval} is not {want} (claimed: {direction})"
    if tolerance["kind"] == "direction":
        if direction == "none":
            return DIRECTION_ONLY, f"interval {interval} contains 0, as claimed (no difference)"
        return DIRECTION_ONLY, f"interval {interval} on the claimed side; only the sign is claimed"
    off = abs(obtained - reference)
    width = allowed(reference, tolerance)
    gap = f"{fmt_value(obtained, unit)} vs reference {fmt_value(reference, unit)}"
    # Equal at the printed precision: 0.1 percentage point, or 0.1 ms.
    if off <= (PRECISION if unit == "relative" else 0.05):
        return REPRODUCED, f"{gap}, interval {interval}"
    scale, suffix = UNITS[unit]
    points = " points" if unit == "relative" else suffix
    if off <= width:
        return WITHIN, f"{gap}, within {width * scale:.1f}{points}"
    return NOT_REPRODUCED, f"{gap}: off by more than {width * scale:.1f}{points}"
