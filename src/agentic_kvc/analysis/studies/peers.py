"""Study 5, every policy on several workloads, and where each wins over load x reuse.

A policy's rank on one workload at one load says little about another: this study runs every
policy on three workloads (the default generator preset, a long-context coding agent, and the
public Mooncake conversation trace) and a grid of load x reuse, and names the best policy per
workload only where its lead is significant.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    diff_cell,
    finding_text,
    md_table,
    ms,
    pct,
)
from agentic_kvc.analysis.studies.common import (
    latency_cells,
    latency_header,
    study,
    variant_summary,
)
from agentic_kvc.analysis.studies.figures import cdf_panels, save

NAME = "peers"
TITLE = "5. Every policy on several workloads"
QUESTION = (
    "Which policy has the lowest TTFT p90 on each workload (default coding agent, long-context "
    "coding agent, Mooncake conversation trace, two workloads held out from predicted_ttft's "
    "design), is its lead significant, and where over load "
    "x reuse does each policy win?"
)
GRID = "grid"
# Our policies, each paired against the best per workload: the hybrid, and the TTFT predictor
# (policy/predicted_ttft.py) that aims past the best peer.
OURS = ("unified", "predicted_ttft")
LOAD, REUSE = "session_rate_per_s", "continue_prob"


def _rank(df: pl.DataFrame) -> list[dict]:
    summ = variant_summary(df, ("policy",))
    return sorted(summ.iter_rows(named=True), key=lambda r: r["ttft_s_p90"])


def workload_table(s: Section, workload: str, df: pl.DataFrame) -> dict:
    """One workload: every policy against the best; returns the headline facts."""
    ranked = _rank(df)
    best = ranked[0]["policy"]
    rows = []
    facts: dict = {"workload": workload, "best": best, "best_p90": ranked[0]["ttft_s_p90"]}
    for i, r in enumerate(ranked):
        p = r["policy"]
        c = compare(df, best, p, "ttft_p90", by="policy") if p != best else None
        c_e = compare(df, best, p, "e2e_p90", by="policy") if p != best else None
        if p in OURS:
            facts[p] = c
        if i == 1:
            facts["runner_up"], facts["runner_cmp"] = p, c
        rows.append(
            [
                p,
                *latency_cells(r, c, c_e),
                pct(r["prefix_hit_rate"]),
            ]
        )
    s.table(
        f"**{workload}**: policies by TTFT p90; differences paired against the best ({best}) "
        "over the same replicates (95% interval).",
        [
            "policy",
            *latency_header("vs best"),
            "hit rate",
        ],
        rows,
    )
    return facts


def grid_winners(df: pl.DataFrame) -> list[dict]:
    """Per grid cell: the policy with the lowest TTFT p90 and whether the runner-up is
    significantly behind it."""
    out = []
    for (load, reuse), cell in df.group_by([LOAD, REUSE], maintain_order=False):
        ranked = _rank(cell)
        if not ranked:
            continue
        best = ranked[0]["policy"]
        c = (
            compare(cell, best, ranked[1]["policy"], "ttft_p90", by="policy")
            if len(ranked) > 1
            else None
        )
        out.append(
            {
                "load": float(load),
                "reuse": float(reuse),
                "best": best,
                "runner_up": ranked[1]["policy"] if len(ranked) > 1 else "",
                "clear": bool(c is not None and c.significant),
                "cmp": c,
            }
        )
    return sorted(out, key=lambda r: (r["load"], r["reuse"]))


def grid_figure(cells: list[dict], out: Path) -> Path:
    loads = sorted({c["load"] for c in cells})
    reuses = sorted({c["reuse"] for c in cells})
    policies = sorted({c["best"] for c in cells})
    colour = {p: i for i, p in enumerate(policies)}
    fig, ax = plt.subplots(figsize=(6, 4))
    grid = [[float("nan")] * len(loads) for _ in reuses]
    for c in cells:
        grid[reuses.index(c["reuse"])][loads.index(c["load"])] = colour[c["best"]]
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, origin="lower", aspect="auto", alpha=0.6)
    for c in cells:
        label = c["best"] + ("" if c["clear"] else "\n(tie: n.s.)")
        ax.text(
            loads.index(c["load"]),
            reuses.index(c["reuse"]),
            label,
            ha="center",
            va="center",
            fontsize=7,
        )
    ax.set_xticks(range(len(loads)), [f"{x:g}" for x in loads])
    ax.set_yticks(range(len(reuses)), [f"{x:g}" for x in reuses])
    ax.set_xlabel("load: sessions started per second")
    ax.set_ylabel("reuse: P(another turn)")
    ax.set_title("Lowest TTFT p90 per cell", fontsize=10)
    fig.tight_layout()
    return save(fig, out)


def cdf_figure(df: pl.DataFrame, facts: list[dict], ours: list[str], out: Path) -> Path | None:
    """A TTFT CDF per workload: its best policy, our policies and round-robin where run."""
    ok = df.filter(pl.col("error").is_null() | (pl.col("error") == ""))
    panels = {}
    for f in facts:
        w = ok.filter(pl.col("variant") == f["workload"])
        shown = list(dict.fromkeys([f["best"], *ours, "round_robin"]))
        panels[f["workload"]] = {
            p: w.filter(pl.col("policy") == p)["ttft_s"].drop_nulls().to_numpy()
            for p in shown
            if p in set(w["policy"].to_list())
        }
    return cdf_panels(panels, out, "TTFT (s)", "TTFT per workload: the best policy and ours")


@study(NAME, TITLE, QUESTION)
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    workloads = [w for w in dict.fromkeys(df["variant"].to_list()) if w != GRID]
    facts = [workload_table(s, w, df.filter(pl.col("variant") == w)) for w in workloads]
    summary_rows = []
    ours = [o for o in OURS if o in set(df["policy"].to_list())]
    for f in facts:
        summary_rows.append(
            [
                f["workload"],
                f["best"],
                ms(f["best_p90"]),
                f.get("runner_up", "-"),
                diff_cell(f.get("runner_cmp")),
                *[diff_cell(f.get(o)) if f["best"] != o else "(best)" for o in ours],
            ]
        )
    # The summary goes first, above the per-workload tables workload_table added.
    s.blocks.insert(
        0,
        "Best policy per workload (lowest TTFT p90, replicates pooled); the runner-up's and "
        f"our policies' ({', '.join(ours)}) TTFT p90 paired against it (95% interval; n.s.: "
        "the lead is not significant).\n\n"
        + md_table(
            [
                "workload",
                "best",
                "TTFT p90 (ms)",
                "runner-up",
                "runner-up vs best",
                *[f"{o} vs best" for o in ours],
            ],
            summary_rows,
        ),
    )
    cdf = cdf_figure(df, facts, ours, figures / "ttft_cdf.svg")
    if cdf is not None:
        s.figure(cdf, "TTFT CDF per workload (seeds pooled): the best policy and ours.", root)
    grid = df.filter(pl.col("variant") == GRID)
    if not grid.is_empty() and LOAD in grid.columns and REUSE in grid.columns:
        grid = grid.with_columns(pl.col(LOAD).cast(pl.Float64), pl.col(REUSE).cast(pl.Float64))
        cells = grid_winners(grid)
        s.table(
            "Load x reuse grid (120 sessions, three seeds per cell): the best policy per cell "
            "and the runner-up's TTFT p90 against it.",
            ["sessions/s", "P(another turn)", "best", "runner-up", "runner-up vs best"],
            [
                [
                    f"{c['load']:g}",
                    f"{c['reuse']:g}",
                    c["best"],
                    c["runner_up"],
                    diff_cell(c["cmp"]),
                ]
                for c in cells
            ],
        )
        s.figure(
            grid_figure(cells, figures / "where_each_wins.svg"),
            "Where each policy wins: the lowest TTFT p90 per load x reuse cell.",
            root,
        )
    said = []
    for f in facts:
        lead = f.get("runner_cmp")
        clear = lead is not None and lead.significant
        said.append(
            f"{f['best']} on {f['workload']}"
            + ("" if clear else f" (its lead over {f.get('runner_up', '-')} is not significant)")
        )
    verdicts = []
    for o in ours:
        cmp = [f for f in facts if f["best"] != o and f.get(o) is not None]
        behind = [f"{f['workload']} ({diff_cell(f[o])})" for f in cmp if f[o].significant]
        verdicts.append(
            f"{o} is significantly behind the best on {', '.join(behind)}."
            if behind
            else f"{o} is never significantly behind the best policy."
        )
    s.answer = "Lowest TTFT p90: " + "; ".join(said) + ". " + " ".join(verdicts)
    for f in facts:
        for o in ours:
            if f.get(o) is not None:
                s.findings.append(
                    finding_text(f[o], f"{o} vs best ({f['best']}) on {f['workload']}, TTFT p90")
                )
            elif (
                f["best"] == o
                and f.get("runner_cmp") is not None
                and f.get("runner_up") not in ours  # that one's finding is above
            ):
                s.findings.append(
                    finding_text(
                        f["runner_cmp"],
                        f"{f['runner_up']} vs {o} (best) on {f['workload']}, TTFT p90",
                    )
                )
    return s
