"""The research's studies, one module each (see `base` for what a study is).

`run_study(name, ...)` is what a study's notebook calls: it loads the study's runs, analyses
them and writes the report section, and returns the section for the notebook to display.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from agentic_kvc.analysis.studies.base import Section, load_study

STUDY_MODULES = (
    "evolution",
    "adaptive",
    "elastic_load",
    "static_pd",
    "peers",
    "concurrency",
    "real",
    "retention",
    "tiers",
)


def study_module(name: str) -> ModuleType:
    if name not in STUDY_MODULES:
        raise ValueError(f"unknown study {name!r}; one of {', '.join(STUDY_MODULES)}")
    return importlib.import_module(f"agentic_kvc.analysis.studies.{name}")


def run_study(
    name: str,
    results_dir: str | Path,
    archive_dir: str | Path | None,
    plan_path: str | Path,
    tables_dir: str | Path,
    figures_dir: str | Path,
) -> Section:
    """Analyse study `name` over its complete planned runs; write section.md + findings.json
    (and the study's CSV tables) to `tables_dir`, figures to `figures_dir`."""
    mod = study_module(name)
    data = load_study(name, results_dir, archive_dir, plan_path)
    figures = Path(figures_dir)
    figures.mkdir(parents=True, exist_ok=True)
    section: Section = mod.analyse(data, figures, Path.cwd())
    section.write(tables_dir)
    return section


def show(section: Section) -> None:
    """Show a section in a notebook: its markdown, then its figures inline (the markdown's
    links are relative to the repository root, which is not the notebook's folder)."""
    from IPython.display import SVG, Image, Markdown, display  # only notebooks need IPython

    display(Markdown(section.markdown()))
    for figure in section.figures:
        # IPython's Image embeds PNG/JPEG/GIF only; the SVG figures need their own display.
        path = str(figure)
        display(SVG(filename=path) if path.endswith(".svg") else Image(filename=path))
