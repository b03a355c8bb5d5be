"""Report section `regret`: counterfactual regret of routing decisions (instruments/regret.py),
from results/instruments/regret.jsonl (`akvc instruments config/instruments.yaml`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.analysis.studies.base import Section, ms, pct
from agentic_kvc.analysis.studies.figures import interval_chart
from agentic_kvc.instruments.regret import costliest, summarize_regret
from agentic_kvc.instruments.stats import mean_ci
from agentic_kvc.io import read_jsonl

TITLE = "Instrument: counterfactual regret of routing decisions"
QUESTION = (
    "Was a routing decision good, compared with what each alternative placement would have "
    "produced from the same fleet state?"
)
THRESHOLD_S = 0.05


def analyse(path: Path, figures: Path | None = None, root: Path | None = None) -> Section:
    """The section; with `figures`, also the chart of each policy's mean regret."""
    s = Section("regret", TITLE, QUESTION)
    rows: list[dict[str, Any]] = list(read_jsonl(path)) if path.is_file() else []
    if not rows:
        s.answer = f"No regret rows at {path}: run `akvc instruments config/instruments.yaml`."
        return s
    groups = summarize_regret(rows, THRESHOLD_S)
    overall = {g.policy: g for g in groups if g.route_class == "all"}
    ranked = sorted(overall.values(), key=lambda g: g.mean.get("ttft_s", 0.0))
    best, worst = ranked[0], ranked[-1]
    s.answer = (
        f"Over {len(rows)} sampled decisions, {best.policy} regrets least (mean TTFT regret "
        f"{ms(best.mean.get('ttft_s'))} ms; {pct(best.share_above.get('ttft_s'))} of its "
        f"decisions cost over {THRESHOLD_S * 1e3:.0f} ms) and {worst.policy} most "
        f"({ms(worst.mean.get('ttft_s'))} ms; {pct(worst.share_above.get('ttft_s'))})."
    )
    s.note(
        "Method: the simulated fleet is forked at every Nth decision (a pickled copy of its "
        "deterministic state) and each alternative runs forward in its own fork: the policy's "
        "choice, the session's previous instance (affinity), the least loaded instance, the "
        "instance really holding the most of the prompt (best cache), and prefill on each "
        "candidate P where the fleet has PD roles. Regret = the policy's outcome minus the best "
        "alternative's (>= 0): the request's TTFT and E2E, and the fleet's mean TTFT over the "
        "requests arriving in the next horizon_s seconds. Setup: config/instruments.yaml."
    )
    chart = []
    for policy in sorted(overall):
        g = overall[policy]
        vals = [r["regret_ttft_s"] for r in rows if r["policy"] == policy]
        m, lo, hi = mean_ci([v for v in vals if v is not None])
        chart.append((policy, m * 1e3, lo * 1e3, hi * 1e3))
        s.findings.append(
            f"regret, {policy}: mean TTFT regret {ms(m)} ms [{ms(lo)}, {ms(hi)}] over "
            f"{g.n} decisions; p90 {ms(g.p90.get('ttft_s'))} ms; "
            f"{pct(g.share_above.get('ttft_s'))} above {THRESHOLD_S * 1e3:.0f} ms"
        )
    fig = (
        interval_chart(
            sorted(chart, key=lambda r: r[1]),
            figures / "regret_by_policy.svg",
            "Mean TTFT regret per routing decision (95% interval)",
            "TTFT regret (ms)",
        )
        if figures is not None
        else None
    )
    if fig is not None:
        s.figure(fig, "Mean TTFT regret of each policy's decisions, with its interval.", root)
    s.table(
        "Regret per policy and route class (ms; share = decisions with TTFT regret above "
        f"{THRESHOLD_S * 1e3:.0f} ms; winners = the alternative with the lowest TTFT).",
        [
            "policy",
            "class",
            "n",
            "TTFT mean",
            "TTFT p90",
            "E2E mean",
            "fleet TTFT mean",
            "share",
            "winners",
        ],
        [
            [
                g.policy,
                g.route_class,
                str(g.n),
                ms(g.mean.get("ttft_s")),
                ms(g.p90.get("ttft_s")),
                ms(g.mean.get("e2e_s")),
                ms(g.mean.get("fleet_ttft_s")),
                pct(g.share_above.get("ttft_s")),
                ", ".join(f"{k} {v}" for k, v in sorted(g.winners.items(), key=lambda kv: -kv[1])),
            ]
            for g in groups
        ],
    )
    top = costliest(rows, 8)
    s.table(
        "The costliest decisions, with their receipts (placement = [prefill, decode]; cached = "
        "tokens really cached per instance at the decision).",
        ["request", "policy", "class / reason", "regret", "chosen", "best", "cached"],
        [
            [
                f"{r['request_id']} @ {r['t']:.1f}s",
                r["policy"],
                f"{r['route_class']} / {r['reason']}",
                f"{ms(r['regret_ttft_s'])} ms",
                f"{r['placements']['policy']} ({ms(r['outcomes']['policy']['ttft_s'])} ms)",
                f"{r['best_ttft_s']} {r['placements'][r['best_ttft_s']]} "
                f"({ms(r['outcomes'][r['best_ttft_s']]['ttft_s'])} ms)",
                str(r["true_cached_tokens"]),
            ]
            for r in top
        ],
    )
    return s
