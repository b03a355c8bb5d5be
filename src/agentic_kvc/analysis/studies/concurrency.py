"""Study 6, the concurrency track: at most 64 or 128 sessions in flight.

More sessions arrive than the fleet serves; the replayer admits at most N sessions at a time
(a queue in front of the router, as an agent platform's concurrency limit would). A policy's
advantage can shrink or grow with N: more sessions in flight means more contexts competing for
each instance's KV cache.

`predicted_ttft` runs twice: with the engine profile the simulator itself runs (its
coefficients are a fit of the simulator's own step cost, a near-oracle no peer has) and with
`cost_model: online` from a generic prior, fitting the step cost from the streams it relays
(profiles/online.py): the honest variant, the one a real fleet would get. Rows are variants
(the policy plus the params that tell two of a policy apart).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    direction,
    finding_text,
    pct,
)
from agentic_kvc.analysis.studies.common import (
    latency_cells,
    latency_header,
    online_fit_table,
    ordered,
    study,
    variant_summary,
)
from agentic_kvc.analysis.studies.figures import diff_chart

NAME = "concurrency"
TITLE = "6. Concurrency track: 64 and 128 sessions in flight"
QUESTION = (
    "With at most 64 or 128 agent sessions in flight, how do the policies compare on TTFT and "
    "E2E against round-robin, and does the ranking change with the limit?"
)
CAP = "max_inflight_sessions"
BASELINE = "round_robin"
PROFILE = "predicted_ttft (cost_model=profile)"
ONLINE = "predicted_ttft (cost_model=online, online_prior=generic)"
ORDER = (
    "round_robin",
    "sglang_cache_aware",
    "lmetric",
    "unified",
    PROFILE,
    ONLINE,
)


@study(NAME, TITLE, QUESTION, needs=(CAP,))
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    df = df.with_columns(pl.col(CAP).cast(pl.Int64))
    summ = variant_summary(df, ("variant", CAP))
    rows, best, chart = [], {}, []
    for cap in sorted(set(df[CAP])):
        at = df.filter(pl.col(CAP) == cap)
        sc = summ.filter(pl.col(CAP) == cap)
        by = {r["variant"]: r for r in sc.iter_rows(named=True)}
        best[cap] = min(by, key=lambda p: by[p]["ttft_s_p90"])
        for p in ordered(list(by), ORDER):
            r = by[p]
            c = compare(at, BASELINE, p, "ttft_p90") if p != BASELINE else None
            c_e = compare(at, BASELINE, p, "e2e_p90") if p != BASELINE else None
            if c is not None:
                chart.append((f"{p}, {cap} in flight", c))
            rows.append(
                [
                    str(cap),
                    p,
                    str(r["requests"]),
                    *latency_cells(r, c, c_e),
                    pct(r["prefix_hit_rate"]),
                ]
            )
            if p == "unified" and c is not None:
                s.findings.append(
                    finding_text(c, f"unified vs round_robin at {cap} in flight, TTFT p90")
                )
    s.table(
        "300 sessions arriving at 2/s; seeds pooled; differences paired against round-robin at "
        "the same limit (95% interval).",
        [
            "in flight",
            "variant",
            "requests",
            *latency_header("vs RR"),
            "hit rate",
        ],
        rows,
    )
    fig = diff_chart(
        chart,
        figures / "ttft_p90_vs_rr.svg",
        "TTFT p90 against round-robin at each limit (95% interval)",
        "TTFT p90 difference (%)",
    )
    if fig is not None:
        s.figure(fig, "Each policy's TTFT p90 against round-robin, per in-flight limit.", root)
    caps = sorted(best)
    parts = []
    for cap in caps:
        at = df.filter(pl.col(CAP) == cap)
        c = compare(at, BASELINE, best[cap], "ttft_p90") if best[cap] != BASELINE else None
        parts.append(
            f"at {cap} in flight {best[cap]} has the lowest TTFT p90"
            + (f" (it {direction(c, 'TTFT p90')} against round-robin)" if c is not None else "")
        )
    same = len(set(best.values())) == 1
    text = (
        "; ".join(parts)
        + ". The best policy "
        + ("is the same at both limits." if same else "changes with the limit.")
    )
    online = _online_vs_peers(s, df, summ, caps)
    s.answer = text[0].upper() + text[1:] + (" " + online if online else "")
    s.note(
        f"`{PROFILE}` holds the engine profile the simulator itself runs (its coefficients are a "
        "fit of the simulated engine's step cost): a near-oracle no peer router has and no "
        f"real fleet would give it. `{ONLINE}` starts from a generic prior and fits the step "
        "cost from the streams it relays (profiles/online.py): the honest variant."
    )
    online_fit_table(s, data, "simulated 8 x H20, generic prior")
    return s


def _online_vs_peers(s: Section, df: pl.DataFrame, summ: pl.DataFrame, caps: list[int]) -> str:
    """At each limit, the online-fitted predicted_ttft against the best other policy (lowest
    TTFT p90 among the variants that are not predicted_ttft) and against the profile-given
    one, paired over seeds; its findings added to `s`. Empty when it did not run."""
    parts = []
    for cap in caps:
        at = df.filter(pl.col(CAP) == cap)
        rows = {r["variant"]: r for r in summ.filter(pl.col(CAP) == cap).iter_rows(named=True)}
        peers = [v for v in rows if not v.startswith("predicted_ttft")]
        if ONLINE not in rows or not peers:
            continue
        peer = min(peers, key=lambda v: rows[v]["ttft_s_p90"])
        c = compare(at, peer, ONLINE, "ttft_p90")
        c_p = compare(at, PROFILE, ONLINE, "ttft_p90") if PROFILE in rows else None
        if c is None:
            continue
        text = f"at {cap} in flight it {direction(c, 'TTFT p90')} against {peer}"
        if c_p is not None:
            text += f" and {direction(c_p, 'TTFT p90')} against the profile-given one"
        parts.append(text)
        s.findings.append(
            finding_text(
                c, f"predicted_ttft online (generic prior) vs {peer} at {cap} in flight, TTFT p90"
            )
        )
    if not parts:
        return ""
    return "predicted_ttft fitting its cost model online: " + "; ".join(parts) + "."
