"""Figures that render everywhere: byte-stable files, small, published beside REPORT.md, and
no image link in the committed Markdown that points at nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest

from agentic_kvc.analysis.report import MAX_FIGURE_BYTES, clear_figures, publish_figures
from agentic_kvc.analysis.studies.figures import cdf_panels, diff_chart, panel_grid, sim_vs_real
from agentic_kvc.paired import PairedResult

REPO = Path(__file__).resolve().parents[2]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def _r(rel: float, lo: float, hi: float, n_differ: int = 10) -> PairedResult:
    return PairedResult("ttft_p90", "a", "b", 1.0, 1 + rel, rel, lo, hi, 5, 100, n_differ)


def _charts(out: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    a = diff_chart(
        [("x", _r(-0.3, -0.4, -0.2)), ("y", _r(0.0, 0.0, 0.0, 0)), ("z", _r(0.1, -0.1, 0.3))],
        out / "diff.svg",
        "t",
        "%",
    )
    b = cdf_panels(
        {"w1": {"p": rng.lognormal(size=5000), "q": rng.lognormal(size=5000)}, "w2": {}},
        out / "cdf.svg",
        "TTFT (s)",
        "t",
    )
    c = sim_vs_real(
        [("rr", [150.0, 160.0, 176.0], 151.0), ("u", [98.0, 115.0], None)], out / "s.svg", "ms", "t"
    )
    return [p for p in (a, b, c) if p is not None]


def test_figures_are_byte_stable_small_and_dateless(tmp_path: Path) -> None:
    first = _charts(tmp_path / "one")
    second = _charts(tmp_path / "two")
    assert len(first) == 3
    for p, q in zip(first, second, strict=True):
        assert p.read_bytes() == q.read_bytes(), p.name
        text = p.read_text()
        assert "<dc:date>" not in text and p.stat().st_size < MAX_FIGURE_BYTES


@pytest.mark.parametrize("legend", ["each", "first"])
def test_panel_grid_lays_out_rows_of_three(
    legend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four panels: two rows of three, the grid sized per panel, the two spare cells hidden,
    each panel titled by its name, the legend on every panel or on the first only."""
    import agentic_kvc.analysis.studies.figures as figures

    seen: dict[str, Any] = {}

    def keep(fig: Any, out: Path) -> Path:  # instead of writing it: the figure to look at
        seen["fig"] = fig
        return out

    monkeypatch.setattr(figures, "save", keep)

    def draw(ax: Any, k: int) -> None:
        ax.plot([0, 1], [k, k], label="series")

    panels = [(f"p{k}", k) for k in range(4)]
    out = panel_grid(panels, draw, tmp_path / "g.svg", (2.0, 1.5), legend=legend, title="t")
    assert out == tmp_path / "g.svg"
    fig = seen["fig"]
    axes = fig.axes
    assert len(axes) == 6 and tuple(fig.get_size_inches()) == (6.0, 3.0)
    assert [ax.get_visible() for ax in axes] == [True] * 4 + [False] * 2
    assert [ax.get_title() for ax in axes[:4]] == ["p0", "p1", "p2", "p3"]
    with_legend = [ax.get_legend() is not None for ax in axes[:4]]
    assert with_legend == ([True] * 4 if legend == "each" else [True, False, False, False])
    assert fig.get_suptitle() == "t"
    plt.close(fig)


def test_nothing_to_draw_draws_nothing(tmp_path: Path) -> None:
    assert diff_chart([("x", None)], tmp_path / "d.svg", "t", "%") is None
    assert cdf_panels({"w": {}}, tmp_path / "c.svg", "s", "t") is None
    assert not list(tmp_path.iterdir())


def test_published_figures_are_copied_relinked_and_missing_ones_unlinked(tmp_path: Path) -> None:
    root, report_dir = tmp_path, tmp_path
    src = root / "results" / "figures" / "study_x" / "a.svg"
    src.parent.mkdir(parents=True)
    src.write_text("<svg/>")
    md = (
        "![A](results/figures/study_x/a.svg)\n\n![B](results/figures/study_x/gone.png)\n"
        "![web](https://example.org/c.png)"
    )
    figs = root / "report_figures"
    (figs / "study_old").mkdir(parents=True)
    (figs / "study_old" / "stale.png").write_bytes(b"x")
    clear_figures(figs)
    out = publish_figures(md, "x", figs, report_dir, root)
    assert "![A](report_figures/x/a.svg)" in out
    assert (figs / "x" / "a.svg").read_text() == "<svg/>"
    assert "gone.png" in out and "![B]" not in out  # said, not linked
    assert "![web](https://example.org/c.png)" in out
    assert not (figs / "study_old" / "stale.png").exists()


@pytest.mark.parametrize("doc", ["REPORT.md", "ARTIFACT.md", "README.md"])
def test_committed_markdown_has_no_broken_image_link(doc: str) -> None:
    """Every image a committed page links to is in the repository (results/ is not), and
    small enough to read on the web."""
    text = (REPO / doc).read_text()
    broken, large = [], []
    for target in IMAGE.findall(text):
        if "://" in target:
            continue
        path = (REPO / doc).parent / target
        if not path.is_file() or target.startswith("results/"):
            broken.append(target)
        elif path.stat().st_size > MAX_FIGURE_BYTES:
            large.append(target)
    assert not broken, f"{doc}: broken image links {broken}"
    assert not large, f"{doc}: figures over {MAX_FIGURE_BYTES} bytes {large}"
