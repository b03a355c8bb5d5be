"""Summaries several studies use: per-variant latency and balance rows, the design numbers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from agentic_kvc.analysis.paired import PairedResult
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
