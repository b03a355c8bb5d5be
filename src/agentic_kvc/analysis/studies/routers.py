"""Report section `routers`: several router replicas in front of one simulated fleet
(instruments/routers.py), from results/instruments/routers.jsonl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.analysis.paired import fmt_diff
from agentic_kvc.analysis.studies.base import Section, ms, num, pct
from agentic_kvc.instruments.stats import paired_quantile_rel
from agentic_kvc.io import read_jsonl

TITLE = "Instrument: several routers at once"
QUESTION = (
    "What happens to load balance, session affinity, prefix hits and TTFT when R router "
    "replicas each see only their own in-flight requests and their own prefix index?"
)


def _rel(point: float, lo: float, hi: float) -> str:
    sig = not (lo <= 0.0 <= hi)
    return fmt_diff({"rel_diff": point, "ci_low": lo, "ci_high": hi, "significant": sig})


def analyse(path: Path) -> Section:
    s = Section("routers", TITLE, QUESTION)
    rows: list[dict[str, Any]] = list(read_jsonl(path)) if path.is_file() else []
    if not rows:
        s.answer = f"No rows at {path}: run `akvc instruments config/instruments.yaml`."
        return s
    s.note(
        "Method: the same simulated fleet and workload with R router replicas, each with its "
        "own policy object, in-flight accounting, session affinity and estimated prefix index "
        "(all scrape the same engines); requests reach a replica at random or by session "
        "(sticky). Herding = mean over sample times of max / mean (running + waiting) over "
        "instances; affinity loss = share of later turns prefilled on another instance than "
        "the previous turn. R = 1 is byte-identical to the single-router run (tested). "
        "Intervals: TTFT p90 of R vs R = 1, paired by request id (bootstrap). Setup: "
        "config/instruments.yaml."
    )
    key = {(r["policy"], r["spread"], r["replicas"]): r for r in rows}
    header = ["policy", "spread", "R", "herding", "affinity loss", "hit rate", "TTFT p90 (ms)"]
    header.append("TTFT p90 vs R=1")
    table = []
    worst: tuple[float, str] | None = None
    for (policy, spread, r), row in sorted(key.items()):
        base = key.get((policy, spread, 1))
        cmp = "-"
        if base is not None and r != 1:
            point, lo, hi, _n = paired_quantile_rel(base["ttft_by_request"], row["ttft_by_request"])
            cmp = _rel(point, lo, hi)
            if r == max(x[2] for x in key if x[:2] == (policy, spread)):
                s.findings.append(
                    f"routers, {policy} ({spread}): R={r} vs 1 replica: TTFT p90 {cmp}; "
                    f"affinity loss {pct(base['affinity_loss'])} -> {pct(row['affinity_loss'])}"
                    f", hit rate {pct(base['hit_rate'])} -> {pct(row['hit_rate'])}"
                )
                if spread == "random" and (worst is None or point > worst[0]):
                    worst = (point, f"{policy} (TTFT p90 {cmp} at R={r})")
        table.append(
            [
                policy,
                spread,
                str(r),
                num(row["herding"]),
                pct(row["affinity_loss"]),
                pct(row["hit_rate"]),
                ms(row["ttft_p90_s"]),
                cmp,
            ]
        )
    s.table("Per policy, spread and number of replicas R.", header, table)
    top = max(r["replicas"] for r in rows)

    def mean_at(spread: str, field: str, r: int) -> float | None:
        vals = [x[field] for x in rows if x["spread"] == spread and x["replicas"] == r]
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    parts = []
    for spread in sorted({r["spread"] for r in rows}):
        parts.append(
            f"spread {spread}, affinity loss {pct(mean_at(spread, 'affinity_loss', 1))} -> "
            f"{pct(mean_at(spread, 'affinity_loss', top))} and hit rate "
            f"{pct(mean_at(spread, 'hit_rate', 1))} -> {pct(mean_at(spread, 'hit_rate', top))}"
        )
    s.answer = (
        f"Averaged over the policies, from 1 to {top} replicas: "
        + "; ".join(parts)
        + ". "
        + (f"The largest TTFT p90 change at R={top} (random): {worst[1]}." if worst else "")
    )
    return s
