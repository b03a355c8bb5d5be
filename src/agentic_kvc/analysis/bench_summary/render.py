"""Rows for benchmark files and the report's tables: each file goes to the summariser registered
under its `benchmark` name (the modules imported below register theirs), or, without one, to a
few of its top-level figures."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

# Imported for their `summariser` registrations.
from agentic_kvc.analysis.bench_summary import (  # noqa: F401
    environment,
    inputs,
    policies,
    prefix_cache,
    proxy,
    sim,
    tier_links,
    tiers,
)
from agentic_kvc.analysis.bench_summary.core import (
    GENERIC_MAX_ROWS,
    NO_GOAL,
    REGISTRY,
    UNREADABLE,
    BenchRow,
    Fig,
    LayoutError,
    num,
    verdict_of,
)

# --- files without a summariser ------------------------------------------------------------------

_SKIP = {"benchmark", "command", "when", "started_at", "finished_at", "trace"}
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_PASS_KEYS = ("pass", "meets_goal", "met", "ok")


def _generic(doc: dict[str, Any]) -> list[Fig]:
    """A few top-level scalars: the script's own pass flags first, then numbers, then text."""
    facts: list[tuple[int, str, Fig]] = []
    for key, v in doc.items():
        if key in _SKIP or isinstance(v, dict | list) or v is None:
            continue
        if isinstance(v, bool):
            is_pass = key in _PASS_KEYS or key.endswith(("_pass", "_ok", "_met"))
            fig = Fig(
                key,
                "yes" if v else "no",
                "the script's own check" if is_pass else "-",
                verdict_of(v) if is_pass else NO_GOAL,
            )
            facts.append((0 if is_pass else 2, key, fig))
        elif isinstance(v, int | float):
            facts.append((1, key, Fig(key, num(float(v)))))
        elif isinstance(v, str) and len(v) <= 60 and not _TIMESTAMP.search(v):
            facts.append((3, key, Fig(key, v)))
    facts.sort(key=lambda f: (f[0], f[1]))
    figs = [f for _, _, f in facts[:GENERIC_MAX_ROWS]]
    return figs or [Fig("top-level figures", "none; see the raw JSON")]


# --- public API -----------------------------------------------------------------------------------


def summarize_file(path: Path) -> list[BenchRow]:
    """Rows for one benchmark JSON; never raises for a bad file (the row says what is wrong)."""
    stem = path.stem
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [BenchRow(stem, "raw JSON", f"{path.name}: {exc}", "-", UNREADABLE)]
    if not isinstance(doc, dict):
        kind = type(doc).__name__
        return [
            BenchRow(
                stem,
                "raw JSON",
                f"{path.name}: top level is a {kind}, not an object",
                "-",
                UNREADABLE,
            )
        ]
    name = str(doc.get("benchmark") or stem)
    title, fn = REGISTRY.get(name, ("", _generic))
    try:
        figs = fn(doc)
    except (LayoutError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        why = str(exc) if isinstance(exc, LayoutError) else f"{type(exc).__name__}: {exc}"
        figs = [
            Fig(
                "layout",
                f"{path.name}: not the layout the {name} summary reads ({why})",
                "-",
                UNREADABLE,
            )
        ]
        figs += _generic(doc)
    return [BenchRow(stem, f.measure, f.value, f.goal, f.verdict, title) for f in figs]


def summarize_benchmarks(bench_dir: Path, skip: Collection[str] = ()) -> list[BenchRow]:
    """Rows for every `*.json` in `bench_dir`, by file name, but those whose stem is in `skip`."""
    rows: list[BenchRow] = []
    for path in sorted(bench_dir.glob("*.json")):
        if path.stem not in skip:
            rows += summarize_file(path)
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(rows: Iterable[BenchRow], link_prefix: str = "results/bench/") -> str:
    """One short table per benchmark file: a heading, the link to its raw JSON, the rows."""
    groups: dict[str, list[BenchRow]] = {}
    for row in rows:
        groups.setdefault(row.benchmark, []).append(row)
    parts = []
    for stem in sorted(groups):
        group = groups[stem]
        link = f"{link_prefix}{stem}.json"
        heading = f"### {stem}" + (f": {group[0].title}" if group[0].title else "")
        lines = [
            heading,
            "",
            f"Raw: [`{link}`]({link})",
            "",
            "| measure | value | goal | verdict |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {_cell(r.measure)} | {_cell(r.value)} | {_cell(r.goal)} | {r.verdict} |"
            for r in group
        ]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + ("\n" if parts else "")
