"""Figures several studies draw (matplotlib, headless; saved as PNG)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl


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
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


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
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
