"""Report section `routers`: several router replicas in front of one simulated fleet
(instruments/routers.py), from results/instruments/routers.jsonl; and, when it was run, 1 vs
2 real proxies in front of the same vLLM CPU engines (results/bench/routers_real.json, from
`akvc routers-real`, instruments/routers_real.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.studies.base import Section, ms, num, pct
from agentic_kvc.analysis.studies.figures import interval_chart
from agentic_kvc.instruments.stats import mean_ci, paired_quantile_rel
from agentic_kvc.io import read_jsonl
from agentic_kvc.paired import fmt_diff

TITLE = "Instrument: several routers at once"
QUESTION = (
    "What happens to load balance, session affinity, prefix hits and TTFT when R router "
    "replicas each see only their own in-flight requests and their own prefix index?"
)


def _rel(point: float, lo: float, hi: float) -> str:
    sig = not (lo <= 0.0 <= hi)
    return fmt_diff({"rel_diff": point, "ci_low": lo, "ci_high": hi, "significant": sig})


def analyse(
    path: Path, real: Path | None = None, figures: Path | None = None, root: Path | None = None
) -> Section:
    """The section; with `figures`, also the chart of TTFT p90 at the most replicas."""
    s = Section("routers", TITLE, QUESTION)
    rows: list[dict[str, Any]] = list(read_jsonl(path)) if path.is_file() else []
    if rows:
        chart = _analyse_sim(s, rows)
        fig = (
            interval_chart(
                chart,
                figures / "ttft_p90_most_replicas.svg",
                "TTFT p90 with the most router replicas against one (95% interval)",
                "TTFT p90 difference (%)",
            )
            if figures is not None
            else None
        )
        if fig is not None:
            s.figure(fig, "TTFT p90 at the most replicas against one, per policy and spread.", root)
    else:
        s.answer = f"No rows at {path}: run `akvc instruments config/instruments.yaml`."
    if real is not None:
        real_engines(s, real)
    return s


def _analyse_sim(s: Section, rows: list[dict[str, Any]]) -> list[tuple[str, float, float, float]]:
    """Fill the simulated part; return (policy and spread, TTFT p90 change in %, interval) at
    the most replicas, for the chart."""
    chart: list[tuple[str, float, float, float]] = []
    s.note(
        "Method: the same simulated fleet and workload with R router replicas, each with its "
        "own policy object, in-flight accounting, session affinity and estimated prefix index "
        "(all scrape the same engines); requests reach a replica at random or by session "
        "(sticky). Herding = mean over sample times of max / mean (running + waiting) over "
        "instances; affinity loss = share of later turns prefilled on another instance than "
        "the previous turn. R = 1 is byte-identical to the single-router run (tested). "
        "Intervals: TTFT p90 of R vs R = 1, paired by request id (bootstrap). Setup: "
        "config/instruments.yaml."
    )
    key = {(r["policy"], r["spread"], r["replicas"]): r for r in rows}
    header = ["policy", "spread", "R", "herding", "affinity loss", "hit rate", "TTFT p90 (ms)"]
    header.append("TTFT p90 vs R=1")
    table = []
    worst: tuple[float, str] | None = None
    for (policy, spread, r), row in sorted(key.items()):
        base = key.get((policy, spread, 1))
        cmp = "-"
        if base is not None and r != 1:
            point, lo, hi, _n = paired_quantile_rel(base["ttft_by_request"], row["ttft_by_request"])
            cmp = _rel(point, lo, hi)
            if r == max(x[2] for x in key if x[:2] == (policy, spread)):
                chart.append((f"{policy} ({spread}), R={r}", point * 100, lo * 100, hi * 100))
                s.findings.append(
                    f"routers, {policy} ({spread}): R={r} vs 1 replica: TTFT p90 {cmp}; "
                    f"affinity loss {pct(base['affinity_loss'])} -> {pct(row['affinity_loss'])}"
                    f", hit rate {pct(base['hit_rate'])} -> {pct(row['hit_rate'])}"
                )
                if spread == "random" and (worst is None or point > worst[0]):
                    worst = (point, f"{policy} (TTFT p90 {cmp} at R={r})")
        table.append(
            [
                policy,
                spread,
                str(r),
                num(row["herding"]),
                pct(row["affinity_loss"]),
                pct(row["hit_rate"]),
                ms(row["ttft_p90_s"]),
                cmp,
            ]
        )
    s.table("Per policy, spread and number of replicas R.", header, table)
    top = max(r["replicas"] for r in rows)

    def mean_at(spread: str, field: str, r: int) -> float | None:
        vals = [x[field] for x in rows if x["spread"] == spread and x["replicas"] == r]
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    parts = []
    for spread in sorted({r["spread"] for r in rows}):
        parts.append(
            f"spread {spread}, affinity loss {pct(mean_at(spread, 'affinity_loss', 1))} -> "
            f"{pct(mean_at(spread, 'affinity_loss', top))} and hit rate "
            f"{pct(mean_at(spread, 'hit_rate', 1))} -> {pct(mean_at(spread, 'hit_rate', top))}"
        )
    s.answer = (
        f"Averaged over the policies, from 1 to {top} replicas: "
        + "; ".join(parts)
        + ". "
        + (f"The largest TTFT p90 change at R={top} (random): {worst[1]}." if worst else "")
    )
    return chart


def _pooled(runs: list[dict[str, Any]], field: str) -> dict[str, float]:
    """`field` per request over the runs' repeats, keyed `repeat:request_id` (pairs the
    same request of the same repeat between variants)."""
    return {
        f"{run['repeat']}:{rid}": v[field]
        for run in runs
        for rid, v in run["per_request"].items()
        if v[field] is not None
    }


def _spread(values: list[float | None], fmt: Any) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    mean = sum(vals) / len(vals)
    return fmt(mean) if len(vals) == 1 else f"{fmt(mean)} ({fmt(min(vals))}-{fmt(max(vals))})"


def real_engines(s: Section, path: Path) -> None:
    """1 vs 2 real proxies in front of the same two vLLM CPU engines (`akvc routers-real`,
    hand-run: it starts engines), beside the simulator's R = 1 / R = 2 of the same config."""
    if not path.is_file():
        s.note(
            "Real engines (1 vs 2 proxies in front of the same 2 vLLM CPU instances): not run "
            f"(`akvc routers-real` writes {path.as_posix()}; docs/instruments.md)."
        )
        return
    data = json.loads(path.read_text())
    runs: list[dict[str, Any]] = data["runs"]
    sims = {(x["policy"], x["proxies"]): x for x in data.get("sim", [])}
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["policy"], run["proxies"]), []).append(run)
    table = []
    for (policy, r), group in sorted(groups.items()):
        sim = sims.get((policy, r), {})
        table.append(
            [
                policy,
                str(r),
                str(len(group)),
                _spread([g["affinity_loss"] for g in group], pct),
                pct(sim.get("affinity_loss")),
                _spread([g["hit_rate"] for g in group], pct),
                pct(sim.get("hit_rate")),
                _spread([g["herding"] for g in group], num),
                num(sim.get("herding")),
                _spread([g["ttft_p90_s"] for g in group], ms),
                ms(sim.get("ttft_p90_s")),
                _spread([g["host_load1_mean"] for g in group], lambda x: f"{x:.1f}"),
            ]
        )
        base = groups.get((policy, 1))
        if r == 1 or not base:
            continue
        b_moved, c_moved = _pooled(base, "moved"), _pooled(group, "moved")
        ids = sorted(set(b_moved) & set(c_moved))
        d, lo, hi = mean_ci([c_moved[i] - b_moved[i] for i in ids])
        aff = f"{d * 100:+.1f} pp [{lo * 100:+.1f}, {hi * 100:+.1f}]" + (
            " n.s." if lo <= 0.0 <= hi else ""
        )
        point, tlo, thi, _n = paired_quantile_rel(_pooled(base, "ttft_s"), _pooled(group, "ttft_s"))
        s.findings.append(
            f"routers on real vLLM CPU, {policy}: {r} proxies vs 1 ({len(group)} runs each, "
            f"random spread): affinity loss {aff} of later turns (simulator "
            f"{pct(sims.get((policy, 1), {}).get('affinity_loss'))} -> "
            f"{pct(sim.get('affinity_loss'))}); TTFT p90 {_rel(point, tlo, thi)}"
        )
    s.table(
        f"Real engines: {data['sessions']} sessions ({data['requests']} requests) of "
        f"{data.get('base_config', {}).get('workload', {}).get('generator', {}).get('preset')} "
        "through 1 or 2 `akvc proxy` processes in front of the same 2 tiny-model vLLM CPU "
        f"instances, each request to a seeded random proxy; mean over runs (min-max), "
        f"interleaved, prefix caches reset between runs (hand-run `akvc routers-real`, "
        f"{path.as_posix()}). Hit rate = engine-reported cached / prompt tokens. Beside each: "
        "the simulator's R-replica run of the same config and request-to-replica choice.",
        [
            "policy",
            "proxies",
            "runs",
            "affinity loss",
            "(sim)",
            "hit rate",
            "(sim)",
            "herding",
            "(sim)",
            "TTFT p90 (ms)",
            "(sim)",
            "load1",
        ],
        table,
    )
