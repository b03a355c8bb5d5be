"""What every study shares: its runs as one frame, paired comparisons, its report section.

A study is a question answered from the runs of the experiments that name it (`study:` in
config/config.yaml). Its notebook (notebooks/study_<name>.py) calls the study's `analyse`,
which returns a `Section`: the question, a one-sentence answer generated from the numbers,
one-line findings (each with its interval) for the report's summary, markdown tables, and
figures. The section is written next to the notebook's tables (`section.md`,
`findings.json`), and REPORT.md is assembled from those files, so every number in it was
computed from the records by the study's own code.

Simulated sections carry no timestamps or run-time facts, so unchanged records regenerate
them byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.analysis.experiments import Plan, PlannedRun, read_plan
from agentic_kvc.analysis.load import (
    REQUEST_SCHEMA,
    SAMPLE_SCHEMA,
    RunDir,
    find_runs,
    records_frame,
)
from agentic_kvc.io import atomic_write_text
from agentic_kvc.paired import (
    PairedResult,
    fmt_diff,
    fmt_interval_pct,
    identical_text,
    paired_compare,
    signed,
    unmoved_text,
)

# Matrix keys whose values are replicates of one variant (pairs), not variants of their own.
REPLICATE_KEYS = ("seed", "repeat", "workload.window_s")
# Matrix keys that name the policy: already the `policy` and `variant` columns (a `policy`
# mapping is named by `experiments.policy_variants`), so no column of their own.
POLICY_KEYS = ("policy.name", "policy")


def short_key(dotted: str) -> str:
    """`workload.generator.params.session_rate_per_s` -> `session_rate_per_s`."""
    return dotted.rsplit(".", 1)[-1]


@dataclass(slots=True)
class StudyData:
    """The requests (and, on demand, instance samples) of one study's runs.

    Columns: the record fields of `load.REQUEST_SCHEMA`, plus `run_id`, `experiment`,
    `variant` (the experiment's name for its runs, else the policy), `policy`, `backend`,
    `instances`, `seed`, `replicate` (what makes two runs a pair: seed, window, repeat) and one
    column per other matrix key, named by its last component (e.g. `session_rate_per_s`).
    """

    requests: pl.DataFrame
    runs: list[tuple[RunDir, PlannedRun]]
    _samples: pl.DataFrame | None = None

    def samples(self) -> pl.DataFrame:
        if self._samples is None:
            frames = [
                _labelled(records_frame(r.path / "instances.jsonl", SAMPLE_SCHEMA), r, p)
                for r, p in self.runs
            ]
            self._samples = pl.concat(frames, how="diagonal") if frames else pl.DataFrame()
        return self._samples

    def manifests(self) -> list[tuple[PlannedRun, dict[str, Any]]]:
        return [(p, r.manifest) for r, p in self.runs]


def _labelled(df: pl.DataFrame, run: RunDir, planned: PlannedRun) -> pl.DataFrame:
    cfg = run.config
    policy = str(cfg.get("policy", {}).get("name", "?"))
    replicate = (
        "|".join(
            f"{short_key(k)}={json.dumps(v)}"
            for k, v in sorted(planned.labels.items())
            if k in REPLICATE_KEYS
        )
        or f"seed={planned.seed}"
    )
    cols = [
        pl.lit(run.run_id).alias("run_id"),
        pl.lit(planned.experiment).alias("experiment"),
        pl.lit(planned.variant or policy).alias("variant"),
        pl.lit(policy).alias("policy"),
        pl.lit(str(cfg.get("backend", "?"))).alias("backend"),
        pl.lit(int(cfg.get("fleet", {}).get("instances", 0)), pl.Int64).alias("instances"),
        pl.lit(planned.seed, pl.Int64).alias("seed"),
        pl.lit(replicate).alias("replicate"),
    ]
    for k, v in planned.labels.items():
        if k not in REPLICATE_KEYS and k not in POLICY_KEYS:
            cols.append(
                pl.lit(json.dumps(v) if isinstance(v, list | dict) else v).alias(short_key(k))
            )
    return df.with_columns(cols)


def load_study(
    study: str,
    results_dir: str | Path,
    archive_dir: str | Path | None,
    plan_path: str | Path,
    experiments: Sequence[str] | None = None,
) -> StudyData:
    """Every complete run of `study` (as the plan names them), labelled per experiment;
    only those of `experiments` when given (a claim reads just the runs it names).

    A run shared by two experiments of the study appears once per experiment, with each
    experiment's labels (e.g. lmetric as experiment A and as the combined baseline).
    """
    plan: Plan = read_plan(plan_path)
    planned = [
        p for p in plan.of_study(study) if experiments is None or p.experiment in experiments
    ]
    found = {
        r.run_id: r
        for r in find_runs(
            Path(results_dir),
            Path(archive_dir) if archive_dir else None,
            [p.run_id for p in planned],
        )
    }
    runs = [(found[p.run_id], p) for p in planned if p.run_id in found]
    frames = [
        _labelled(records_frame(r.path / "requests.jsonl", REQUEST_SCHEMA), r, p) for r, p in runs
    ]
    requests = pl.concat(frames, how="diagonal") if frames else pl.DataFrame()
    return StudyData(requests, runs)


# --- paired comparisons -----------------------------------------------------------------------


def compare(
    df: pl.DataFrame, baseline: str, candidate: str, metric: str, by: str = "variant"
) -> PairedResult | None:
    """Paired comparison over the `replicate` pairs; None when they share no replicate."""
    try:
        return paired_compare(df, baseline, candidate, metric, by=by, pair_on=("replicate",))
    except ValueError:
        return None


def diff_cell(r: PairedResult | None) -> str:
    return "-" if r is None else fmt_diff(r)


def finding_text(r: PairedResult, what: str) -> str:
    """`what`: e.g. "unified vs round_robin, TTFT p90"."""
    return f"{what}: {fmt_diff(r)} ({r.n_pairs} paired replicates)"


def direction(r: PairedResult | None, what: str) -> str:
    """Words for a paired difference on `what` (e.g. "TTFT p90"): "lowers TTFT p90 by 12%
    [-15, -8]", "does not significantly change TTFT p90 (+2%, interval [-3, +6] contains
    0)", or, when no paired request differs, "leaves TTFT p90 unchanged (identical: the
    mechanism never acted, ...)". No bound is printed as a signed zero ("[-13, -0.2]")."""
    if r is None:
        return f"has no paired runs to compare {what}"
    if r.identical:
        return f"leaves {what} unchanged, {identical_text(r)}"
    unmoved = unmoved_text(r)
    if unmoved is not None:
        return f"leaves {what} {unmoved}"
    if r.n_pairs < 2:
        return (
            f"changes {what} by {signed(r.rel_diff * 100, 0)}% in its one replicate (no "
            "interval over replicates: not a finding)"
        )
    interval = fmt_interval_pct(r.ci_low, r.ci_high, 0)
    if not r.significant:
        return (
            f"does not significantly change {what} ({signed(r.rel_diff * 100, 0)}%, "
            f"interval {interval} contains 0)"
        )
    verb = "lowers" if r.rel_diff < 0 else "raises"
    return f"{verb} {what} by {signed(abs(r.rel_diff) * 100, 0).lstrip('+')}% {interval}"


# --- formatting -------------------------------------------------------------------------------


def ms(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x * 1000:.0f}"


def sec(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.2f}"


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or x != x else f"{x * 100:.{digits}f}%"


def num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> str:
    """A markdown table; `align` is one char per column (l/r), right by default after the
    first column."""
    rows = [list(map(str, r)) for r in rows]
    al = align or "l" + "r" * (len(header) - 1)
    sep = ["---" if a == "l" else "--:" for a in al]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


@dataclass(slots=True, frozen=True)
class Expectation:
    """A design document's stated expectation faced with the records: what the design expects
    (and where it says so), what the runs show, whether it holds, and the table row(s) that
    explain the difference (header and cells, generated from the same numbers as the study's
    tables) with a sentence reading them."""

    expected: str
    source: str
    outcome: str
    holds: bool
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    why: str = ""

    def markdown(self) -> str:
        verdict = "holds" if self.holds else "does not hold"
        parts = [
            f"**Design expectation** ({self.source}): {self.expected}",
            f"**Outcome**: {self.outcome} The expectation {verdict}.",
        ]
        if self.rows:
            what = "row that explains it" if len(self.rows) == 1 else "rows that explain it"
            parts.append(f"**The {what}**:\n\n" + md_table(list(self.header), self.rows))
        if self.why:
            parts.append(f"**Why**: {self.why}")
        return "\n\n".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "source": self.source,
            "outcome": self.outcome,
            "holds": self.holds,
            "why": self.why,
        }


@dataclass(slots=True)
class Section:
    name: str
    title: str
    question: str
    answer: str = ""
    findings: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # markdown: tables, notes, figure links
    theirs: str = ""  # the design documents' own numbers, rendered
    figures: list[Path] = field(default_factory=list)  # for the notebook to show inline
    expectations: list[Expectation] = field(default_factory=list)

    def table(self, caption: str, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        self.blocks.append(f"{caption}\n\n{md_table(header, rows)}")

    def note(self, text: str) -> None:
        self.blocks.append(text)

    def expect(self, e: Expectation) -> None:
        """Face a design expectation with the outcome (shown in the section and findings)."""
        self.expectations.append(e)
        self.blocks.append(e.markdown())

    def figure(self, path: Path, caption: str, report_root: Path | None = None) -> None:
        self.figures.append(path)
        rel = path if report_root is None else _relative(path, report_root)
        self.blocks.append(f"![{caption}]({rel.as_posix()})\n\n*{caption}*")

    def markdown(self) -> str:
        parts = [f"## {self.title}", f"**Question.** {self.question}", f"**Answer.** {self.answer}"]
        parts += self.blocks
        if self.theirs:
            parts.append(self.theirs)
        return "\n\n".join(parts) + "\n"

    def write(self, out_dir: str | Path) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "section.md", self.markdown())
        atomic_write_text(
            out / "findings.json",
            json.dumps(
                {
                    "study": self.name,
                    "title": self.title,
                    "question": self.question,
                    "answer": self.answer,
                    "findings": self.findings,
                    "expectations": [e.to_json() for e in self.expectations],
                },
                indent=1,
            )
            + "\n",
        )


def _relative(path: Path, root: Path) -> Path:
    try:
        return path.resolve().relative_to(root.resolve())
    except ValueError:
        return path


def empty_section(name: str, title: str, question: str) -> Section:
    s = Section(name, title, question)
    s.answer = "No complete runs of this study were found, so the data do not decide it."
    return s
