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
def main(
    template: Path,
    plan: Path | None,
    results: Path,
    archive: Path | None,
    sections: tuple[str, ...],
    out: Path,
) -> None:
    """Compute every table from the runs' requests.jsonl and write OUT from TEMPLATE."""
    context = build_context(
        results,
        archive,
        read_plan(plan) if plan else None,
        report_dir=out.parent,
        sections=sections,
    )
    atomic_write_text(out, render(template, context))
    click.echo(f"{out}: {context['n_runs']} runs, {context['n_requests']} requests")


if __name__ == "__main__":
    main()
