"""What every benchmark summary shares: the row types, the registry that maps a benchmark's
name to its summariser, and the formatting of values and verdicts."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MET, NOT_MET, NO_GOAL = "met", "not met", "no goal"
NOT_MEASURED, UNREADABLE = "not measured", "unreadable"
GENERIC_MAX_ROWS = 4


@dataclass(frozen=True)
class BenchRow:
    benchmark: str  # the JSON file's stem: the table it belongs to
    measure: str
    value: str
    goal: str
    verdict: str
    title: str = ""  # what the benchmark measures (the table's heading)


@dataclass(frozen=True)
class Fig:
    """One row before it is tied to a file."""

    measure: str
    value: str
    goal: str = "-"
    verdict: str = NO_GOAL


class LayoutError(Exception):
    """The JSON lacks a field its summariser needs (an older or foreign layout)."""


Summariser = Callable[[dict[str, Any]], list[Fig]]
REGISTRY: dict[str, tuple[str, Summariser]] = {}


def summariser(name: str, title: str) -> Callable[[Summariser], Summariser]:
    def register(fn: Summariser) -> Summariser:
        REGISTRY[name] = (title, fn)
        return fn

    return register


def registered() -> list[str]:
    return sorted(REGISTRY)


# --- reading and formatting -------------------------------------------------------------------


def field_at(doc: Any, *path: str | int) -> Any:
    """doc[path[0]][path[1]]...; a missing step raises LayoutError naming the field."""
    cur = doc
    for i, key in enumerate(path):
        try:
            cur = cur[key]
        except (KeyError, IndexError, TypeError):
            raise LayoutError(f"missing field {'.'.join(map(str, path[: i + 1]))}") from None
    return cur


def num(x: float) -> str:
    """Three significant figures, thousands separated from 100 up."""
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def signed(x: float) -> str:
    return ("+" if x >= 0 else "") + num(x)


def pct(x: float, sign: bool = False) -> str:
    return f"{x * 100:+.1f}%" if sign else f"{x * 100:.1f}%"


def tolerance_pct(x: float) -> str:
    """A tolerance as a percentage, without trailing zeros (0.05 -> 5%)."""
    return f"{x * 100:g}%"


def verdict_of(ok: bool | None) -> str:
    return NOT_MEASURED if ok is None else MET if ok else NOT_MET


# --- paired rows ({rel_diff, ci_low, ci_high[, significant]}: agentic_kvc.paired's to_row) ----


def above_zero(c: Mapping[str, Any]) -> bool:
    """A paired row significantly above 0: its interval, unless the row says it is not
    significant (`agentic_kvc.paired`: one pair never is, whatever its interval)."""
    return float(c["ci_low"]) > 0 and c.get("significant", True) is not False


def below_zero(c: Mapping[str, Any]) -> bool:
    """A paired row significantly below 0 (as `above_zero`)."""
    return float(c["ci_high"]) < 0 and c.get("significant", True) is not False


def paired_cell(c: Mapping[str, Any]) -> str:
    """A paired row as '+4.4% [-2.9, +9.0]'."""
    return (
        f"{pct(float(c['rel_diff']), sign=True)} [{float(c['ci_low']) * 100:+.1f}, "
        f"{float(c['ci_high']) * 100:+.1f}]"
    )
