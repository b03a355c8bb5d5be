"""Rebuild one claim from raw records and write results/claims/<id>.json.

A `paired` claim reads only the runs of its experiments (as the experiment plan names them),
marks the requests of its two sides (`baseline`, `candidate`: column filters, after the common
`where` filters) and compares them with `agentic_kvc.paired` over the runs' replicates (seeds,
trace windows, repeats): the same statistic and interval the report's findings use. A
`finding` claim reads the line of a section's findings.json that starts with its `finding`
text (for sections that are not experiment studies).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.analysis.studies.base import load_study
from agentic_kvc.analysis.studies.common import WITHIN_SPREAD
from agentic_kvc.analysis.tables import latency_summary
from agentic_kvc.artifact.registry import REAL_TIERS, Claim
from agentic_kvc.artifact.verdict import MAX_ERROR_SHARE, NOT_REPRODUCED, UNITS, verdict
from agentic_kvc.io import atomic_write_text
from agentic_kvc.paired import QUANTILE_METRICS, paired_compare

_NUM = r"([+-]?\d+(?:\.\d+)?)"
# "-44.9% [-59.4, -30.7]" (relative) or "+554.9 ms [+532.1, +577.7]" (ms).
_INTERVAL = {
    unit: re.compile(rf"{_NUM}{re.escape(suffix)} \[{_NUM}, {_NUM}\]")
    for unit, (_, suffix) in UNITS.items()
}


def _mask(df: pl.DataFrame, selector: dict[str, Any], claim: Claim, side: str) -> pl.Expr:
    expr = pl.lit(True)
    for col, value in selector.items():
        if col not in df.columns:
            raise ValueError(
                f"claim {claim.id}: {side}.{col}: no such column in its runs "
                f"(columns: {', '.join(sorted(df.columns))})"
            )
        expr = expr & (pl.col(col) == value)
    return expr


def paired_sides(df: pl.DataFrame, claim: Claim) -> pl.DataFrame:
    """The claim's requests with a `side` column: "baseline" or "candidate"."""
    spec = claim.spec
    if spec.get("where"):
        df = df.filter(_mask(df, spec["where"], claim, "where"))
    base = df.filter(_mask(df, spec["baseline"], claim, "baseline"))
    cand = df.filter(_mask(df, spec["candidate"], claim, "candidate"))
    frames = [
        base.with_columns(pl.lit("baseline").alias("side")),
        cand.with_columns(pl.lit("candidate").alias("side")),
    ]
    # A run shared by two of the claim's experiments appears once per experiment: keep one.
    return pl.concat(frames, how="diagonal").unique(
        subset=["side", "run_id", "request_id"], keep="first", maintain_order=True
    )


def error_shares(df: pl.DataFrame) -> dict[str, float]:
    """Per side: the share of its requests that failed (an error recorded)."""
    failed = pl.col("error").is_not_null() & (pl.col("error") != "")
    return {
        r["side"]: float(r["share"])
        for r in df.group_by("side").agg(failed.mean().alias("share")).iter_rows(named=True)
    }


def repeat_spread(df: pl.DataFrame, metric: str) -> float | None:
    """docs/statistics.md's spread of real repeats: per side, (max - min) / mean of the
    per-run statistic; the larger side's. None for a metric that is not a latency quantile."""
    if metric not in QUANTILE_METRICS:
        return None
    col, q = QUANTILE_METRICS[metric]
    stat = f"{col}_p{round(q * 100)}"
    per_run = latency_summary(df, ["side", "run_id"])
    out = []
    for side in ("baseline", "candidate"):
        vals = [v for v in per_run.filter(pl.col("side") == side)[stat].to_list() if v is not None]
        mean = sum(vals) / len(vals) if vals else 0.0
        if len(vals) >= 2 and mean:
            out.append((max(vals) - min(vals)) / mean)
    return max(out) if out else None


def _sides(claim: Claim, data_requests: pl.DataFrame, baseline: dict[str, Any]) -> pl.DataFrame:
    spec = {**claim.spec, "baseline": baseline}
    return paired_sides(data_requests, Claim(spec))


def _paired(
    claim: Claim, results: Path, archive: Path | None, plan: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = claim.spec
    data = load_study(spec["study"], results, archive, plan, experiments=claim.experiments)
    if data.requests.is_empty():
        raise ValueError(f"claim {claim.id}: no complete runs of {claim.experiments}")
    df = paired_sides(data.requests, claim)
    r = paired_compare(
        df, "baseline", "candidate", spec["metric"], by="side", pair_on=("replicate",)
    )
    extra: dict[str, Any] = {"error_share": error_shares(df)}
    if claim.tier in REAL_TIERS:
        extra["spread"] = repeat_spread(df, spec["metric"])
    if spec.get("strongest_baseline"):
        # The strongest baseline, beside the weaker one the claim names (issue 32): the same
        # candidate against it, so a reader sees both.
        sdf = _sides(claim, data.requests, spec["strongest_baseline"])
        sr = paired_compare(
            sdf, "baseline", "candidate", spec["metric"], by="side", pair_on=("replicate",)
        )
        extra["vs_strongest"] = {
            "baseline": spec["strongest_baseline"],
            "value": sr.rel_diff,
            "ci_low": sr.ci_low,
            "ci_high": sr.ci_high,
            "n_pairs": sr.n_pairs,
            "error_share": error_shares(sdf),
        }
    runs = df.select("side", "run_id", "replicate", "backend").unique().sort("side", "replicate")
    sources = {rd.run_id: rd.source for rd, _ in data.runs}
    obtained = {
        "value": r.rel_diff,
        "baseline_value": r.baseline_value,
        "candidate_value": r.candidate_value,
        "ci_low": r.ci_low,
        "ci_high": r.ci_high,
        "n_pairs": r.n_pairs,
        "n_requests": r.n_requests,
        "n_differ": r.n_differ,
        **extra,
    }
    provenance = {
        "seeds": sorted(set(runs["replicate"].to_list())),
        "runs": [
            {**row, "source": sources.get(row["run_id"], "?")} for row in runs.iter_rows(named=True)
        ],
    }
    return obtained, provenance


def _finding(claim: Claim, results: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    path = results / "tables" / f"study_{claim.spec['study']}" / "findings.json"
    if not path.is_file():
        raise ValueError(f"{path}: no such file (the section's notebook has not run)")
    lines = json.loads(path.read_text())["findings"]
    prefix, unit = claim.spec["finding"], claim.unit
    line = next((x for x in lines if x.startswith(prefix)), None)
    # The first value with its interval in the claim's unit (a line may carry several).
    m = _INTERVAL[unit].search(line or "")
    if m is None:
        raise ValueError(
            f"{path}: no finding starting with {prefix!r} that carries a {unit} interval"
        )
    value, lo, hi = (float(g) / UNITS[unit][0] for g in m.groups())
    obtained: dict[str, Any] = {"value": value, "ci_low": lo, "ci_high": hi, "finding": line}
    if line and WITHIN_SPREAD in line:
        obtained["within_spread"] = True  # the section applied the spread rule and says so
    strongest = claim.spec.get("strongest_finding")
    if strongest:
        s_line = next((x for x in lines if x.startswith(strongest)), None)
        sm = _INTERVAL[unit].search(s_line or "")
        if sm is None:
            raise ValueError(f"{path}: no finding starting with {strongest!r} (strongest_finding)")
        sv, slo, shi = (float(g) / UNITS[unit][0] for g in sm.groups())
        obtained["vs_strongest"] = {"finding": s_line, "value": sv, "ci_low": slo, "ci_high": shi}
    return obtained, {"source": str(path)}


def evaluate(claim: Claim, results: Path, archive: Path | None, plan: Path) -> dict[str, Any]:
    """The claim's record: obtained vs reference, interval, replicates, verdict."""
    spec = claim.spec
    if claim.kind == "paired":
        obtained, provenance = _paired(claim, results, archive, plan)
    else:
        obtained, provenance = _finding(claim, results)
    v, reason = judge(claim, obtained)
    keys = ("statement", "study", "figure", "tier", "metric", "baseline", "candidate", "where")
    return {
        "id": claim.id,
        **{k: spec[k] for k in keys if k in spec},
        "unit": claim.unit,
        "direction": spec["direction"],
        "reference": spec["reference"],
        "reference_interval": spec.get("reference_interval"),
        "tolerance": spec["tolerance"],
        "obtained": obtained,
        **provenance,
        "verdict": v,
        "reason": reason,
    }


def judge(claim: Claim, obtained: dict[str, Any]) -> tuple[str, str]:
    """The verdict of `obtained` (a claim file's) against the claim's spec: its reference,
    tolerance, equivalence margin, error-share limit and, for real engines, the spread."""
    spec = claim.spec
    if claim.tier in REAL_TIERS and obtained.get("within_spread") and spec["direction"] != "none":
        return NOT_REPRODUCED, (
            "the section finds the difference within the repeats' own spread, so the "
            "machine's load alone could make it"
        )
    return verdict(
        obtained["value"],
        obtained["ci_low"],
        obtained["ci_high"],
        float(spec["reference"]),
        spec["direction"],
        spec["tolerance"],
        claim.unit,
        margin=spec.get("equivalence_margin"),
        spread=obtained.get("spread") if claim.tier in REAL_TIERS else None,
        error_share=obtained.get("error_share"),
        max_error_share=float(spec.get("max_error_share", MAX_ERROR_SHARE)),
    )


def write_claim(record: dict[str, Any], out: Path) -> None:
    # No timestamps: the same records give the same file, byte for byte.
    atomic_write_text(out, json.dumps(record, indent=1, sort_keys=True) + "\n")
