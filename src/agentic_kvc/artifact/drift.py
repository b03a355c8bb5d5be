"""A claim's reference against the REPORT.md it states: drift found, and fixed by one command.

Each claim names the REPORT.md line it was taken from (`report_line`: the start of a finding
bullet or a table row); the first value with its interval on that line, in the claim's unit,
is what the report says now. `drift` lists every claim whose registry reference or interval
differs from it at the report's printed precision (or whose line is gone), and `sync` rewrites
the registry's `reference` and `reference_interval` from the report, so after `make report`
the claims, ARTIFACT.md (generated from them) and REPORT.md say the same numbers. The report
and the claims are computed from the same records, so a claim that drifts is a stale registry,
not a failed reproduction (that is `make claims-check`'s job).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.artifact.registry import Claim, Registry
from agentic_kvc.artifact.verdict import UNITS, fmt_interval, fmt_value

_NUM = r"([+-]?\d+(?:\.\d+)?)"
_INTERVAL = {
    unit: re.compile(rf"{_NUM}{re.escape(suffix)} \[{_NUM}, {_NUM}\]")
    for unit, (_, suffix) in UNITS.items()
}
# Half of the last printed digit (0.1 point or 0.1 ms) in the claim's own unit.
_HALF_DIGIT = {"relative": 0.0005 + 1e-9, "ms": 0.05 + 1e-9}


@dataclass(slots=True, frozen=True)
class Drift:
    claim_id: str
    registry: str
    report: str  # "-" when the line is not in the report
    problem: str


def report_value(report: str, prefix: str, unit: str = "relative") -> tuple[float, ...] | None:
    """(value, low, high) in the claim's unit (a relative difference as a fraction), from the
    first REPORT.md line that starts with `prefix`; None if no such line carries one."""
    for line in report.splitlines():
        if line.startswith(prefix):
            m = _INTERVAL[unit].search(line[len(prefix) :])
            if m is not None:
                return tuple(float(g) / UNITS[unit][0] for g in m.groups())
    return None


def _registry_triple(c: Claim) -> tuple[float, float, float] | None:
    iv = c.spec.get("reference_interval")
    if not iv:
        return None
    return float(c.spec["reference"]), float(iv[0]), float(iv[1])


def drift(reg: Registry, report: str) -> list[Drift]:
    """Every claim with a `report_line` whose reference or interval is not the report's."""
    out = []
    for c in reg.claims:
        prefix = c.spec.get("report_line")
        if not prefix:
            continue
        mine = _registry_triple(c)
        shown = (
            f"{fmt_value(mine[0], c.unit)} {fmt_interval(mine[1], mine[2], c.unit)}"
            if mine
            else fmt_value(float(c.spec["reference"]), c.unit)
        )
        theirs = report_value(report, prefix, c.unit)
        if theirs is None:
            out.append(Drift(c.id, shown, "-", f"no REPORT.md line starts with {prefix!r}"))
            continue
        said = f"{fmt_value(theirs[0], c.unit)} {fmt_interval(theirs[1], theirs[2], c.unit)}"
        if mine is None or any(
            abs(a - b) > _HALF_DIGIT[c.unit] for a, b in zip(mine, theirs, strict=True)
        ):
            out.append(Drift(c.id, shown, said, "the registry's reference is not the report's"))
    return out


def _fmt(x: float) -> str:
    """A registry number: the report's precision (0.1 point = 3 decimals of a fraction)."""
    return f"{x:.4f}".rstrip("0").rstrip(".") if x else "0.0"


def sync(registry_path: Path, reg: Registry, report: str) -> list[str]:
    """Rewrite `reference` and `reference_interval` of every drifted claim in the registry
    file (its other text is kept as written); the ids rewritten."""
    text = registry_path.read_text()
    done = []
    for d in drift(reg, report):
        c = reg.get(d.claim_id)
        got = report_value(report, c.spec["report_line"], c.unit)
        if got is None:
            continue
        value, lo, hi = (round(x, 4) if c.unit == "relative" else round(x, 1) for x in got)
        block = re.compile(rf"(^[ ]*- id: {re.escape(c.id)}\n)(.*?)(?=^[ ]*- id: |\Z)", re.S | re.M)
        m = block.search(text)
        if m is None:
            raise ValueError(f"{registry_path}: no block for claim {c.id}")
        body = re.sub(
            r"(^[ ]+reference: )[^\n]*", rf"\g<1>{_fmt(value)}", m.group(2), count=1, flags=re.M
        )
        # A block-style list (one bound a line) becomes the flow style the registry uses.
        body = re.sub(
            r"(^[ ]+reference_interval:)\n[ ]*- [^\n]*\n[ ]*- [^\n]*",
            r"\g<1> []",
            body,
            count=1,
            flags=re.M,
        )
        body = re.sub(
            r"(^[ ]+reference_interval: )[^\n]*",
            rf"\g<1>[{_fmt(lo)}, {_fmt(hi)}]",
            body,
            count=1,
            flags=re.M,
        )
        text = text[: m.start(2)] + body + text[m.end(2) :]
        done.append(c.id)
    registry_path.write_text(text)
    return done
