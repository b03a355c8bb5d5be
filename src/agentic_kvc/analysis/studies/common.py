"""Summaries several studies use: per-variant latency and balance rows, the design numbers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    diff_cell,
    empty_section,
    md_table,
    ms,
    sec,
)
from agentic_kvc.analysis.tables import latency_summary, token_load_per_instance, token_load_summary
from agentic_kvc.paired import PairedResult

THEIRS_FILE = Path(__file__).with_name("theirs.yaml")

# What `run_study` calls: the study's records, the figures folder, the report root.
Analyse = Callable[[StudyData, Path, Path | None], Section]
# What a study writes: its new section, the requests, then as `Analyse` takes them.
Body = Callable[[Section, pl.DataFrame, StudyData, Path, Path | None], Section]


def study(
    name: str, title: str, question: str, needs: Sequence[str] = ()
) -> Callable[[Body], Analyse]:
    """Make a study's `analyse(data, figures, root)` from its body, so that every study opens the
    same way: with no complete runs, or without a column of `needs` (a matrix key the study
    reads), its section says the data do not answer the question; otherwise the body fills a
    new section, headed by the design documents' numbers for `name` (theirs.yaml) if any."""

    def wrap(body: Body) -> Analyse:
        def analyse(data: StudyData, figures: Path, root: Path | None = None) -> Section:
            df = data.requests
            if df.is_empty() or any(c not in df.columns for c in needs):
                return empty_section(name, title, question)
            return body(
                Section(name, title, question, theirs=theirs_block(name)), df, data, figures, root
            )

        analyse.__doc__, analyse.__module__ = body.__doc__, body.__module__
        return analyse

    return wrap


def variant_summary(df: pl.DataFrame, by: Sequence[str] = ("variant",)) -> pl.DataFrame:
    """`tables.latency_summary` per group, plus the mean over runs of token load max/min."""
    lat = latency_summary(df, list(by))
    load = token_load_summary(token_load_per_instance(df)).join(
        df.select("run_id", *by).unique(), on="run_id", how="left", suffix="_r"
    )
    imb = load.group_by(list(by)).agg(pl.col("max_over_min").mean().alias("token_max_over_min"))
    return lat.join(imb, on=list(by), how="left").sort(list(by))


def latency_header(ttft_vs: str, e2e_vs: str | None = None) -> list[str]:
    """The columns `latency_cells` fills, each difference headed by what it is against."""
    return ["TTFT p50 (ms)", "TTFT p90 (ms)", ttft_vs, "E2E p90 (s)", e2e_vs or ttft_vs]


def latency_cells(
    row: dict[str, Any], ttft: PairedResult | None, e2e: PairedResult | None
) -> list[str]:
    """A `variant_summary` row's TTFT p50 and p90 and E2E p90, with the paired differences of
    TTFT p90 and E2E p90 (none for the baseline itself)."""
    return [
        ms(row["ttft_s_p50"]),
        ms(row["ttft_s_p90"]),
        diff_cell(ttft),
        sec(row["e2e_s_p90"]),
        diff_cell(e2e),
    ]


def repeat_spread(values: Sequence[float]) -> float:
    """(max - min) / mean of one variant's per-repeat statistic, NaNs left out: the spread a
    real-engine difference must exceed to count (docs/statistics.md)."""
    vals = [v for v in values if v == v]
    if not vals:
        return float("nan")
    mean = sum(vals) / len(vals)
    return (max(vals) - min(vals)) / mean if mean else float("nan")


# What a real-engine study's finding line carries when a significant difference is not
# beyond the repeats' spread; the headlines and the artifact's verdicts look for it there.
WITHIN_SPREAD = "within the repeats' spread"


def beyond_spread(r: PairedResult | None, *spreads: float) -> bool:
    """Significant and larger than the larger side's repeat spread (docs/statistics.md)."""
    if r is None or not r.significant:
        return False
    worst = max((s for s in spreads if s == s), default=0.0)
    return abs(r.rel_diff) > worst


def mean_range_ms(values: Sequence[float]) -> str:
    """`mean (min-max)` of per-repeat seconds, in ms; "-" when there is none."""
    vals = [v for v in values if v == v]
    if not vals:
        return "-"
    return f"{ms(sum(vals) / len(vals))} ({ms(min(vals))}-{ms(max(vals))})"


def ordered(values: Sequence[str], first: Sequence[str]) -> list[str]:
    """`values` with those of `first` leading, in that order, the rest sorted."""
    lead = [v for v in first if v in values]
    return lead + sorted(v for v in values if v not in lead)


@cache
def _theirs() -> dict[str, Any]:
    if not THEIRS_FILE.is_file():
        return {}
    return yaml.safe_load(THEIRS_FILE.read_text()) or {}


def theirs_block(study: str) -> str:
    """The design documents' own 8 x H20 numbers for `study`, labelled as theirs."""
    entry = _theirs().get(study)
    if not entry:
        return ""
    items = entry if isinstance(entry, list) else entry.get("items", [])
    note = "" if isinstance(entry, list) else entry.get("note", "")
    head = (
        "*Their numbers, for orientation only: what the design documents report from their own"
        " testbed and workload, or expect where the note says so; not reproduced here and not"
        " targets.*"
    )
    rows = []
    for it in items:
        unit = f" {it['unit']}" if it.get("unit") else ""
        src = str(it.get("source", ""))
        # "seeds/003_3a91...txt (Section)" -> "seeds/003 (Section)": the file's number suffices.
        short = src.split("_", 1)[0] + (" (" + src.split(" (", 1)[1] if " (" in src else "")
        rows.append([str(it.get("what", "?")), f"{it.get('value', '?')}{unit}", short])
    if not rows:
        return ""
    parts = [
        head,
        f"*{note}*" if note else "",
        md_table(["theirs", "value", "source"], rows, "lrl"),
    ]
    return "\n\n".join(p for p in parts if p)


# --- an online-fitted cost model's state, from the decision receipts ------------------------

# The affine step cost's terms, in the receipts' order (profiles/online.py TERMS), each shown
# in a unit that keeps it near 1.
FIT_TERMS = (
    ("overhead", "ms", 1e3),
    ("per token", "us", 1e6),
    ("per attention pair", "ns", 1e9),
    ("per decoding seq", "us", 1e6),
    ("per KV token", "ns", 1e9),
)


def run_fit(path: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first and the last state of a run's online cost model: the receipts
    (`scores.cost_model` of each request record: coefficients, their errors, recent relative
    error, observations) with the fewest and the most observations; None without receipts."""
    from agentic_kvc.io import read_jsonl

    fits = []
    for rec in read_jsonl(path / "requests.jsonl"):
        fit = (rec.get("scores") or {}).get("cost_model")
        if isinstance(fit, dict) and fit.get("coef"):
            fits.append(fit)
    if not fits:
        return None
    return (
        min(fits, key=lambda f: f.get("observations", 0)),
        max(fits, key=lambda f: f.get("observations", 0)),
    )


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def online_fit_table(s: Section, data: StudyData, what: str) -> bool:
    """Add a table of each online-fitted variant's cost model (`cost_model: online`): its
    prior (the first decision's coefficients), where the fit ended (median over the runs of
    the last receipt's), the observations it had by then and its recent relative error on
    TTFT and on inter-token gaps (mean over runs). `what` says what the runs are. False (and
    nothing added) when no run carries the receipts."""
    by: dict[tuple[str, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for run, planned in data.runs:
        cfg = getattr(run, "config", None) or {}
        params = (cfg.get("policy") or {}).get("params") or {}
        path = getattr(run, "path", None)
        if params.get("cost_model") != "online" or path is None:
            continue
        fit = run_fit(Path(path))
        if fit is None:
            continue
        variant = (planned.variant if planned is not None else "") or cfg["policy"]["name"]
        by.setdefault((variant, str(cfg.get("backend", "?"))), []).append(fit)
    if not by:
        return False
    rows = []
    for (variant, backend), fits in sorted(by.items()):
        coefs = [
            f"{fits[0][0]['coef'][i] * scale:.3g} -> "
            f"{_median([last['coef'][i] for _, last in fits]) * scale:.3g}"
            for i, (_, _, scale) in enumerate(FIT_TERMS)
        ]
        obs = sum(last.get("observations", 0) for _, last in fits) / len(fits)
        drops = [sum((last.get("dropped") or {}).values()) for _, last in fits]
        seen = f"{obs:.0f}" + (f" ({sum(drops) / len(fits):.0f} dropped)" if any(drops) else "")
        errors = []
        for kind in ("ttft", "decode"):
            vals = [(last.get("rel_error") or {}).get(kind) for _, last in fits]
            got = [float(v) for v in vals if v is not None]
            errors.append(f"{sum(got) / len(got) * 100:.0f}%" if got else "-")
        rows.append([variant, backend, str(len(fits)), seen, *coefs, *errors])
    s.table(
        f"The online-fitted cost model ({what}): its prior (the first decision's coefficients) "
        "-> where the fit ended (median over runs of the last decision's receipt, "
        "`scores.cost_model` in the request records), the observations it had by then (mean "
        "over runs; a TTFT and a decode observation per finished request; in brackets, decode "
        "observations dropped as delivery bursts, mean over runs) and its recent relative "
        "error on TTFT and on inter-token gaps, |observed - predicted| / max(observed, "
        "predicted), at most 100% (mean over runs). A fit starts afresh in every run.",
        [
            "variant",
            "backend",
            "runs",
            "observations",
            *(f"{name} ({unit})" for name, unit, _ in FIT_TERMS),
            "rel. error TTFT",
            "rel. error ITL",
        ],
        rows,
    )
    return True
