"""Expected vs obtained: the verdict of one claim.

Checks that come before the value (each fails the claim on its own):
- error share: a side whose runs failed more than `max_error_share` of their requests (default
  2%) is not judged: a policy whose slow requests time out would otherwise look faster;
- equivalence: a claimed "no difference" is an equivalence test, not "the interval contains
  0" (which more noise makes easier to pass): both interval bounds must lie inside the
  claim's stated margin, +/- `equivalence_margin`;
- spread (real engines, docs/statistics.md): a claimed difference must also be larger than
  the spread of the repeats themselves (max - min over the mean of one side's per-repeat
  values), or the machine's load alone could have made it.

Then:
- not reproduced: a comparing claim whose 95% paired interval does not lie on the claimed side
  of 0, or an obtained value further from the reference than the tolerance allows;
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
# Requests that may fail on either side before a claim is not judged (docs/artifact.md).
MAX_ERROR_SHARE = 0.02


def fmt_value(x: float, unit: str = "relative") -> str:
    scale, suffix = UNITS[unit]
    return f"{x * scale:+.1f}{suffix}"


def fmt_interval(lo: float, hi: float, unit: str = "relative") -> str:
    scale = UNITS[unit][0]
    return f"[{lo * scale:+.1f}, {hi * scale:+.1f}]"


def interval_holds(direction: str, lo: float, hi: float, margin: float | None = None) -> bool:
    """Whether the interval [lo, hi] supports the claimed direction; for "none" (no
    difference), whether both bounds lie inside +/- `margin` (an equivalence test)."""
    if lo != lo or hi != hi:  # NaN: no interval, nothing supports the claim
        return False
    if direction == "lower":
        return hi < 0
    if direction == "higher":
        return lo > 0
    if direction == "none":
        if margin is None:
            raise ValueError("a 'none' (no difference) claim needs an equivalence margin")
        return -margin <= lo and hi <= margin
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
    *,
    margin: float | None = None,
    spread: float | None = None,
    error_share: dict[str, float] | None = None,
    max_error_share: float = MAX_ERROR_SHARE,
) -> tuple[str, str]:
    """(verdict, one-line reason). `margin`: the equivalence margin of a "none" claim, in the
    claim's unit; `spread`: the repeats' own spread (relative), for real-engine claims;
    `error_share`: each side's share of failed requests."""
    interval = fmt_interval(lo, hi, unit)
    scale, suffix = UNITS[unit]
    for side, share in sorted((error_share or {}).items()):
        if share > max_error_share:
            return NOT_REPRODUCED, (
                f"the {side}'s runs failed {share:.1%} of their requests, above the "
                f"{max_error_share:.0%} a judged claim allows"
            )
    if not interval_holds(direction, lo, hi, margin):
        if direction == "none":
            m = f"{margin * scale:.1f}{suffix.strip() or '%'}" if margin is not None else "?"
            return NOT_REPRODUCED, (
                f"interval {interval} is not inside the equivalence margin +/-{m} "
                "(claimed: no difference)"
            )
        want = {"lower": "below 0", "higher": "above 0"}[direction]
        return NOT_REPRODUCED, f"interval {interval} is not {want} (claimed: {direction})"
    if spread is not None and direction != "none" and abs(obtained) <= spread:
        return NOT_REPRODUCED, (
            f"{fmt_value(obtained, unit)} is within the repeats' own spread "
            f"({spread * 100:.0f}% of the mean), so the machine's load alone could make it"
        )
    if tolerance["kind"] == "direction":
        if direction == "none":
            return DIRECTION_ONLY, f"interval {interval} inside the equivalence margin, as claimed"
        return DIRECTION_ONLY, f"interval {interval} on the claimed side; only the sign is claimed"
    off = abs(obtained - reference)
    width = allowed(reference, tolerance)
    gap = f"{fmt_value(obtained, unit)} vs reference {fmt_value(reference, unit)}"
    if direction == "none" and margin is not None:
        gap += (
            f", interval inside the equivalence margin +/-{margin * scale:g}{suffix.strip() or '%'}"
        )
    # Equal at the printed precision: 0.1 percentage point, or 0.1 ms.
    if off <= (PRECISION if unit == "relative" else 0.05):
        return REPRODUCED, f"{gap}, interval {interval}"
    points = " points" if unit == "relative" else suffix
    if off <= width:
        return WITHIN, f"{gap}, within {width * scale:.1f}{points}"
    return NOT_REPRODUCED, f"{gap}: off by more than {width * scale:.1f}{points}"
