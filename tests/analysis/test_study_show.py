"""A notebook shows a section's figures whatever their format (the report's line charts are
SVG since issue 32; IPython's Image refuses SVG, which failed every study notebook with one)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from agentic_kvc.analysis.studies import show
from agentic_kvc.analysis.studies.base import Section
from agentic_kvc.analysis.studies.figures import save


def test_show_displays_svg_and_png_figures(tmp_path: Path) -> None:
    s = Section("x", "X", "Does it show?")
    for suffix in (".svg", ".png"):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, 1])
        s.figure(save(fig, tmp_path / f"f{suffix}"), f"a {suffix} figure")
    show(s)  # raised "Cannot embed the 'svg' image format" before
