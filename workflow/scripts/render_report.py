"""Render REPORT.md from complete runs (called by the `report` rule; runnable by hand)."""

from __future__ import annotations

from pathlib import Path

import click

from agentic_kvc.analysis.experiments import read_plan
from agentic_kvc.analysis.report import build_context, render
from agentic_kvc.io import atomic_write_text


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--template", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--plan",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Experiment plan (results/work/plan.json); without it every complete run is reported.",
)
@click.option("--results", type=click.Path(file_okay=False, path_type=Path), default="results")
@click.option("--archive", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option(
    "--section",
    "sections",
    multiple=True,
    help="A report section besides the plan's studies (results/tables/study_NAME/); repeatable.",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default="REPORT.md")
@click.option(
    "--runs-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The per-run page (every run's row, real runs' engine flags), from RUNS.md.j2 beside "
    "TEMPLATE; REPORT.md links to it.",
)
@click.option(
    "--figures-out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Copy the figures the sections link to into this folder (committed beside OUT, so "
    "the report shows them on any checkout) and link them there.",
)
def main(
    template: Path,
    plan: Path | None,
    results: Path,
    archive: Path | None,
    sections: tuple[str, ...],
    out: Path,
    runs_out: Path | None,
    figures_out: Path | None,
) -> None:
    """Compute every table from the runs' requests.jsonl and write OUT from TEMPLATE."""
    context = build_context(
        results,
        archive,
        read_plan(plan) if plan else None,
        report_dir=out.parent,
        sections=sections,
        figures_dir=figures_out,
        runs_page=runs_out,
    )
    atomic_write_text(out, render(template, context))
    if runs_out is not None:
        runs_out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(runs_out, render(template.with_name("RUNS.md.j2"), context))
    click.echo(f"{out}: {context['n_runs']} runs, {context['n_requests']} requests")


if __name__ == "__main__":
    main()
