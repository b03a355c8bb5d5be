"""`make claims-check`: every claim's verdict in one table; non-zero exit on any failure.

The verdict is recomputed from each claim file's obtained values and the registry's current
reference and tolerance, so the table always judges against what the registry says now (a
reference edited since the claim was built is judged, not a stale verdict reprinted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agentic_kvc.analysis.studies.base import md_table
from agentic_kvc.artifact.evaluate import judge
from agentic_kvc.artifact.registry import Registry
from agentic_kvc.artifact.verdict import (
    NOT_REPRODUCED,
    PASSING,
    fmt_interval,
    fmt_value,
)

NOT_BUILT = "not built"


@dataclass(slots=True)
class Row:
    claim_id: str
    tier: str
    study: str
    obtained: str
    reference: str
    verdict: str
    reason: str


def check(registry: Registry, claims_dir: Path, only: list[str] | None = None) -> list[Row]:
    rows = []
    for c in registry.claims:
        if only and c.id not in only:
            continue
        path = claims_dir / f"{c.id}.json"
        ref = fmt_value(float(c.spec["reference"]), c.unit)
        if not path.is_file():
            rows.append(Row(c.id, c.tier, c.spec["study"], "-", ref, NOT_BUILT, str(path)))
            continue
        o = json.loads(path.read_text())["obtained"]
        v, reason = judge(c, o)
        got = f"{fmt_value(o['value'], c.unit)} {fmt_interval(o['ci_low'], o['ci_high'], c.unit)}"
        vs = o.get("vs_strongest")
        if vs:
            # The strongest baseline's comparison, named beside the claim's own.
            reason += (
                f"; vs the strongest baseline: {fmt_value(vs['value'], c.unit)} "
                f"{fmt_interval(vs['ci_low'], vs['ci_high'], c.unit)}"
            )
        rows.append(Row(c.id, c.tier, c.spec["study"], got, ref, v, reason))
    return rows


def table(rows: list[Row]) -> str:
    return md_table(
        ["claim", "tier", "study", "obtained [95% CI]", "reference", "verdict", "why"],
        [[r.claim_id, r.tier, r.study, r.obtained, r.reference, r.verdict, r.reason] for r in rows],
        "lllrrll",
    )


def passed(rows: list[Row]) -> bool:
    """No claim is "not reproduced" and every selected claim was built."""
    return all(r.verdict in PASSING for r in rows) and not any(
        r.verdict == NOT_REPRODUCED for r in rows
    )
