"""Study: KV retention across tool pauses (simulator, `sim.kv_retention_ttl_s`).

When an agent's turn ends in a tool call, its session comes back after the tool's pause. In
vLLM the finished request's blocks go to the free queue at once, so a busy instance may evict
them before the session returns. Holding them for a TTL (sim/engine.py: held blocks are
evicted only after every unheld free block, oldest hold first) keeps the session warm, at the
price of space other sessions' caches would have used. Which wins depends on the TTL against
the pause distribution: this study varies both, on a cache under pressure.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    diff_cell,
    direction,
    pct,
    sec,
)
from agentic_kvc.analysis.studies.common import study, variant_summary
from agentic_kvc.analysis.studies.figures import diff_chart

NAME = "retention"
TITLE = "KV retention across tool pauses (simulator)"
QUESTION = (
    "If a session's KV is held for a TTL after a turn that ends in a tool call, how do prefix "
    "hit rate and TTFT change with the TTL and with the tool-pause distribution?"
)
TTL = "kv_retention_ttl_s"
TAIL = "tool_wait_tail_prob"


def _pauses(tail: float) -> str:
    return "lognormal" if tail == 0 else f"lognormal + {tail:.0%} Pareto tail"


@study(NAME, TITLE, QUESTION, needs=(TTL, TAIL))
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    df = df.with_columns(pl.col(TTL).cast(pl.Float64), pl.col(TAIL).cast(pl.Float64)).with_columns(
        pl.col(TTL).cast(pl.Utf8).alias("ttl")
    )
    summ = variant_summary(df, (TAIL, TTL))
    rows, answers = [], []
    for tail in sorted(set(df[TAIL])):
        at = df.filter(pl.col(TAIL) == tail)
        by = {r[TTL]: r for r in summ.filter(pl.col(TAIL) == tail).iter_rows(named=True)}
        base = min(by)
        for ttl in sorted(by):
            r = by[ttl]
            cmp = {
                m: compare(at, str(base), str(ttl), m, by="ttl") if ttl != base else None
                for m in ("hit_rate", "ttft_p90", "e2e_p90")
            }
            rows.append(
                [
                    _pauses(tail),
                    f"{ttl:g}",
                    pct(r["prefix_hit_rate"]),
                    diff_cell(cmp["hit_rate"]),
                    sec(r["ttft_s_p50"]),
                    sec(r["ttft_s_p90"]),
                    diff_cell(cmp["ttft_p90"]),
                    sec(r["e2e_s_p90"]),
                    diff_cell(cmp["e2e_p90"]),
                ]
            )
            if ttl != base:
                for metric, what in (("hit_rate", "hit rate"), ("ttft_p90", "TTFT p90")):
                    c = cmp[metric]
                    # TTFT p90 always; the hit rate only where it moved significantly
                    if c is not None and (metric == "ttft_p90" or c.significant):
                        s.findings.append(
                            f"Retention {ttl:g} s vs none, {_pauses(tail)} pauses, {what}: "
                            f"{direction(c, what)} ({c.n_pairs} paired seeds)"
                        )
                answers.append((tail, ttl, cmp["ttft_p90"]))
    s.table(
        "Per TTL and pause distribution (unified policy, paired over seeds against TTL 0; "
        "differences as candidate / baseline - 1 with 95% intervals)",
        [
            "tool pauses",
            "TTL (s)",
            "hit rate",
            "vs TTL 0",
            "TTFT p50 (s)",
            "TTFT p90 (s)",
            "vs TTL 0",
            "E2E p90 (s)",
            "vs TTL 0",
        ],
        rows,
    )
    fig = diff_chart(
        [(f"TTL {ttl:g} s, {_pauses(t)}", c) for t, ttl, c in answers],
        figures / "ttft_p90_vs_ttl0.svg",
        "TTFT p90 with the KV held for a TTL, against no hold (95% interval)",
        "TTFT p90 difference (%)",
    )
    if fig is not None:
        s.figure(fig, "TTFT p90 per TTL and pause distribution, paired against no hold.", root)
    sig = [(t, ttl, c) for t, ttl, c in answers if c is not None and c.significant]
    better = [x for x in sig if x[2].rel_diff < 0]
    worse = [x for x in sig if x[2].rel_diff > 0]
    parts = []
    if better:
        parts.append(
            "lowers TTFT p90 at "
            + ", ".join(f"TTL {ttl:g} s ({_pauses(t)})" for t, ttl, _ in better)
        )
    if worse:
        parts.append(
            "raises it at " + ", ".join(f"TTL {ttl:g} s ({_pauses(t)})" for t, ttl, _ in worse)
        )
    s.answer = (
        "Holding a session's KV across its tool pause "
        + ("; ".join(parts) if parts else "does not significantly change TTFT p90 at any TTL")
        + " (paired over seeds, 95% intervals)."
    )
    s.note(
        "Setup: config/config.yaml experiment `retention` (30 agentic-long sessions at "
        "0.03/s on 2 x H20 with a 250k-token KV cache each, so the cache is under pressure). "
        "Only a turn that ends in a tool call (its session goes on) is held; a hold ends when "
        "the session's "
        "next turn is admitted there, when its TTL runs out, or, oldest first, when an "
        "admission needs the blocks. Real vLLM has no such knob; docs/agents.md says what a "
        "KV connector can do without a fork."
    )
    return s
