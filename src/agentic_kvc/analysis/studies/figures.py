"""Figures several studies draw (matplotlib, headless).

Every figure goes through `save`: SVG for line and point charts (small, sharp on the web),
PNG for dense time series, both byte-stable (no date, no random ids: matplotlib's
`svg.hashsalt` is fixed), so unchanged records regenerate the same bytes and the figures
committed beside REPORT.md (report_figures/) only change when their data do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.axes import Axes

from agentic_kvc.paired import PairedResult

# Fixed ids in SVG output (else each save draws random ones), and no date in its metadata.
mpl.rcParams["svg.hashsalt"] = "agentic_kvc"
mpl.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files, no glyph paths

T = TypeVar("T")


def save(fig: Any, out: Path, dpi: int = 80) -> Path:
    """Write `fig` to `out` (SVG or PNG by suffix) with no time-dependent metadata."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".svg":
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    else:
        fig.savefig(out, dpi=dpi, metadata={"Software": None}, pil_kwargs={"optimize": True})
    plt.close(fig)
    return out


def diff_chart(
    rows: Sequence[tuple[str, PairedResult | None]],
    out: Path,
    title: str,
    xlabel: str,
) -> Path | None:
    """Paired differences with their 95% intervals, one row each (an identical pair drawn as
    a hollow marker at 0): the chart that answers "does X change Y against the baseline"."""
    rows = [(label, r) for label, r in rows if r is not None and np.isfinite(r.rel_diff)]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(rows) + 1.1))
    for i, (_label, r) in enumerate(rows):
        y = len(rows) - 1 - i
        if r.identical:
            ax.plot([0], [y], "o", mfc="none", color="0.4")
            continue
        color = "tab:blue" if r.rel_diff < 0 else "tab:red"
        if not r.significant:
            color = "0.55"
        ax.plot([r.ci_low * 100, r.ci_high * 100], [y, y], color=color, lw=2)
        ax.plot([r.rel_diff * 100], [y], "o", color=color)
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _ in reversed(rows)], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save(fig, out)


def interval_chart(
    rows: Sequence[tuple[str, float, float, float]],
    out: Path,
    title: str,
    xlabel: str,
) -> Path | None:
    """Values with their intervals, one row each ((label, value, low, high)), e.g. a mean
    regret per policy with its 95% interval."""
    rows = [r for r in rows if all(np.isfinite(x) for x in r[1:])]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(rows) + 1.1))
    for i, (_label, v, lo, hi) in enumerate(rows):
        y = len(rows) - 1 - i
        ax.plot([lo, hi], [y, y], color="tab:blue", lw=2)
        ax.plot([v], [y], "o", color="tab:blue")
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save(fig, out)


def panel_grid(
    panels: Sequence[tuple[str, T]],
    draw: Callable[[Axes, T], None],
    out: Path,
    panel_size: tuple[float, float],
    legend: Literal["each", "first"] = "each",
    legend_size: float = 6,
    title: str | None = None,
) -> Path:
    """One panel per (name, data) of `panels`, at most three a row, each `panel_size` inches
    (width, height), titled by its name; `draw(ax, data)` draws a panel's content and axis
    labels. The legend is on every panel (`each`: each has its own series) or on the first
    (`first`: all panels draw the same series); spare cells of the grid are hidden. The
    layout the studies' multi-panel figures share (cdf_panels; the tiers study's capacity
    figure)."""
    n = len(panels)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(
        rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows), squeeze=False
    )
    flat = list(axes.flat)
    for ax, (name, data) in zip(flat, panels, strict=False):
        draw(ax, data)
        if legend == "each":
            ax.legend(fontsize=legend_size)
        ax.set_title(name, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in flat[n:]:
        ax.set_visible(False)
    if legend == "first":
        flat[0].legend(fontsize=legend_size)
    if title is not None:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save(fig, out)


def cdf_panels(
    panels: Mapping[str, Mapping[str, np.ndarray]],
    out: Path,
    xlabel: str,
    title: str,
    points: int = 120,
) -> Path | None:
    """One panel per key of `panels` (e.g. a workload): the empirical CDF of each series
    (e.g. a policy's TTFT, seconds), on a log x axis, each drawn at `points` quantiles so the
    file stays small whatever the request count."""
    panels = {k: v for k, v in panels.items() if any(len(a) for a in v.values())}
    if not panels:
        return None
    qs = np.linspace(0, 1, points)
    # One colour per series name across panels, so a policy reads the same everywhere.
    names = list(dict.fromkeys(label for series in panels.values() for label in series))
    colour = {label: f"C{i % 10}" for i, label in enumerate(names)}
    first = next(iter(panels.values()))

    def draw(ax: Axes, series: Mapping[str, np.ndarray]) -> None:
        for label, values in series.items():
            v = np.asarray(values, dtype=float)
            v = v[np.isfinite(v) & (v > 0)]
            if v.size:
                ax.plot(np.quantile(v, qs), qs, lw=1.1, label=label, color=colour[label])
        ax.set_xscale("log")
        ax.set_xlabel(xlabel, fontsize=7)
        ax.grid(alpha=0.3)
        if series is first:  # the y axis is the same everywhere: named once, top left
            ax.set_ylabel("share of requests", fontsize=7)

    return panel_grid(list(panels.items()), draw, out, (3.3, 2.6), legend_size=5, title=title)


def sim_vs_real(
    rows: Sequence[tuple[str, Sequence[float], float | None]],
    out: Path,
    ylabel: str,
    title: str,
) -> Path | None:
    """Per variant: each real repeat (dots), their range (bar), and the simulator's
    prediction for the same config (cross)."""
    rows = [r for r in rows if r[1]]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for i, (_label, real, sim) in enumerate(rows):
        ax.plot([i, i], [min(real), max(real)], color="0.6", lw=6, alpha=0.5)
        ax.plot([i] * len(real), real, "o", color="tab:blue", ms=4)
        if sim is not None:
            ax.plot([i], [sim], "x", color="tab:red", ms=9, mew=2)
    ax.plot([], [], "o", color="tab:blue", label="real repeats")
    ax.plot([], [], "x", color="tab:red", label="simulator")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r[0] for r in rows], fontsize=7, rotation=15, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out)


def kv_usage_over_time(
    samples: pl.DataFrame,
    variants: Sequence[str],
    out: Path,
    title: str,
    instances: Sequence[int] | None = None,
) -> Path | None:
    """One panel per variant: each instance's KV-cache usage over time (first replicate)."""
    if samples.is_empty() or "kv_usage" not in samples.columns:
        return None
    variants = [v for v in variants if v in set(samples["variant"])]
    if not variants:
        return None
    fig, axes = plt.subplots(
        len(variants), 1, figsize=(8, 1.8 * len(variants) + 0.6), sharex=True, squeeze=False
    )
    for ax, v in zip(axes[:, 0], variants, strict=True):
        sv = samples.filter(pl.col("variant") == v)
        first = sorted(set(sv["replicate"]))[0]
        sv = sv.filter(pl.col("replicate") == first).sort("t")
        for inst in sorted(set(sv["instance"])):
            if instances is not None and inst not in instances:
                continue
            si = sv.filter(pl.col("instance") == inst)
            ax.plot(
                si["t"].to_list(),
                si["kv_usage"].fill_null(0).to_list(),
                lw=0.8,
                label=f"instance {inst}",
            )
        ax.set_ylabel("KV usage")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{v} ({first})", fontsize=9)
    axes[-1, 0].set_xlabel("simulated time (s)")
    axes[0, 0].legend(fontsize=6, ncol=4, loc="upper right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save(fig, out)


def lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    out: Path,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, ys in series.items():
        ax.plot(list(x), list(ys), marker="o", label=name)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out)
