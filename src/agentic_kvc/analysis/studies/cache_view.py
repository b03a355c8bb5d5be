"""Report section `cache_view`: the prefix-cache views' error against the engines' block pools
(instruments/cache_error.py), from results/instruments/cache_view.jsonl."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.studies.base import Section, num, pct
from agentic_kvc.analysis.studies.figures import lines
from agentic_kvc.instruments.cache_error import GAP_BINS, errors, summarize
from agentic_kvc.instruments.stats import mean_ci
from agentic_kvc.io import read_jsonl

TITLE = "Instrument: cache-view error across tool pauses"
QUESTION = (
    "How often does the router's approximate prefix index believe in a cache hit that the "
    "engine evicted during a tool pause, and how does that grow with the pause and with KV "
    "pressure?"
)


def _bins_in_order() -> list[str]:
    return ["first turn"] + [f"[{lo:g}, {hi:g})" for lo, hi in pairwise(GAP_BINS)]


def analyse(
    path: Path, figures: Path, root: Path | None = None, real: Path | None = None
) -> Section:
    s = Section("cache_view", TITLE, QUESTION)
    rows: list[dict[str, Any]] = list(read_jsonl(path)) if path.is_file() else []
    if not rows:
        s.answer = f"No rows at {path}: run `akvc instruments config/instruments.yaml`."
        return s
    kvs = sorted({r["kv_cache_tokens"] for r in rows}, reverse=True)
    s.note(
        "Method: at every decision of a simulated run, each view's predicted cached tokens "
        "for every instance is compared with the instance's block pool at that moment (capped "
        "at input - 1, as vLLM caps its hit). The estimated view is the router's LRU guess fed "
        "every routed prompt and sized to the engine's blocks; the exact view is what KV events "
        "report, which in the simulator is the pool itself (zero error: a check). False hit = "
        "predicted minus true when positive; missed hit = the reverse. Idle gap = time since "
        "the session's previous request finished (the tool pause). Pairs = (decision, "
        "instance). Setup: config/instruments.yaml."
    )
    order = _bins_in_order()
    series: dict[str, list[float]] = {}
    xs = list(range(len(order)))
    per_kv = {}
    for kv in kvs:
        sub = [r for r in rows if r["kv_cache_tokens"] == kv]
        table = [t for t in summarize(sub) if t["view"] == "estimated"]
        by_bin = {t["bin"]: t for t in table}
        series[f"estimated, {kv // 1000}k KV tokens"] = [
            by_bin[b]["false_hit_tokens"] if b in by_bin else float("nan") for b in order
        ]
        exact = [e for r in sub for e in errors(r, "exact")]
        chosen = [f for r in sub for f, _m in errors(r, "estimated", chosen_only=True)]
        later = [r for r in sub if r["idle_gap_s"] is not None]
        chosen_later = [f for r in later for f, _m in errors(r, "estimated", chosen_only=True)]
        per_kv[kv] = (sub, table, exact, chosen, chosen_later)
        m, lo, hi = mean_ci(chosen_later)
        s.findings.append(
            f"cache view, {kv // 1000}k KV tokens/instance: the estimated view over-predicts "
            f"the chosen instance's hit by {num(m, 0)} tokens [{num(lo, 0)}, {num(hi, 0)}] per "
            f"later turn ({len(chosen_later)} turns, "
            f"{pct(sum(f > 0 for f in chosen_later) / max(len(chosen_later), 1))} with a false "
            f"hit); exact view error {sum(f + m_ for f, m_ in exact)} tokens"
        )
        s.table(
            f"Estimated view by idle gap, {kv // 1000}k KV tokens per instance (all policies; "
            "tokens per pair).",
            ["idle gap (s)", "pairs", "false-hit tokens", "missed-hit tokens", "false-hit share"],
            [
                [
                    b,
                    str(by_bin[b]["pairs"]),
                    num(by_bin[b]["false_hit_tokens"], 1),
                    num(by_bin[b]["missed_hit_tokens"], 1),
                    pct(by_bin[b]["false_hit_share"], 2),
                ]
                for b in order
                if b in by_bin
            ],
        )
    heavy = kvs[-1]
    kv_table = [t for t in summarize(per_kv[heavy][0], by="kv_usage") if t["view"] == "estimated"]
    s.table(
        f"Estimated view by the instance's KV usage at the decision, {heavy // 1000}k KV tokens.",
        ["KV usage", "pairs", "false-hit tokens", "missed-hit tokens", "false-hit share"],
        [
            [
                t["bin"],
                str(t["pairs"]),
                num(t["false_hit_tokens"], 1),
                num(t["missed_hit_tokens"], 1),
                pct(t["false_hit_share"], 2),
            ]
            for t in kv_table
        ],
    )
    pol = sorted({r["policy"] for r in rows})
    s.table(
        f"False hits on the chosen instance by policy ({heavy // 1000}k KV tokens, later turns).",
        ["policy", "turns", "false-hit tokens", "false-hit share"],
        [
            [
                p,
                str(len(fs)),
                num(sum(fs) / max(len(fs), 1), 1),
                pct(sum(f > 0 for f in fs) / max(len(fs), 1), 1),
            ]
            for p in pol
            for fs in [
                [
                    f
                    for r in per_kv[heavy][0]
                    if r["policy"] == p and r["idle_gap_s"] is not None
                    for f, _m in errors(r, "estimated", chosen_only=True)
                ]
            ]
        ],
    )

    def share(kv: int) -> float:
        fl = per_kv[kv][4]
        return sum(f > 0 for f in fl) / max(len(fl), 1)

    exact_total = sum(f + m_ for kv in kvs for f, m_ in per_kv[kv][2])
    light, heavy_share = share(kvs[0]), share(heavy)
    trend = (
        "more often" if heavy_share > light else "less often" if heavy_share < light else "as often"
    )
    s.answer = (
        f"The exact view's error is {exact_total} tokens (it is the pool). The estimated view "
        f"over-predicts the chosen instance's hit on {pct(heavy_share)} of later turns at "
        f"{heavy // 1000}k KV tokens per instance, {trend} than at {kvs[0] // 1000}k "
        f"({pct(light)}); the tables break this down by idle gap and KV usage."
    )
    if real is not None and real.is_file():
        _real_table(s, json.loads(real.read_text()), real)
    fig = lines(
        xs,
        series,
        figures / "false_hits_by_idle_gap.png",
        "idle gap bin: " + ", ".join(f"{i}={b}" for i, b in enumerate(order)),
        "false-hit tokens per (decision, instance)",
        "Estimated prefix view: false-hit tokens by the session's idle gap",
    )
    s.figure(fig, "False-hit tokens of the estimated view by idle gap, per KV size.", root)
    return s


def _real_table(s: Section, data: dict[str, Any], path: Path) -> None:
    """The hand-run real-engine benchmark (benchmarks/cache_view_real.py), when present."""
    rows = []
    for r in data.get("runs", []):
        kv = r["kv_cache_tokens"]
        rows.append(
            [
                r["policy"],
                "default" if kv is None else str(kv),
                str(r["real"]["turns"]),
                pct(r["real"]["false_hit_share"]),
                num(r["real"]["false_hit_tokens"], 1),
                pct(r["sim_estimated"]["false_hit_share"]),
                num((r.get("host_load") or {}).get("mean"), 2),
            ]
        )
    s.table(
        f"Real vLLM CPU engines (2 tiny-model instances, {data.get('base')}; hand-run "
        f"benchmark {path.as_posix()}): the estimated view's prediction for the chosen "
        "instance against the engine-reported cached tokens, later turns; beside it the "
        "simulator's share for the same config, and the machine's mean load during replay.",
        [
            "policy",
            "KV tokens/instance",
            "turns",
            "false-hit share (real)",
            "false-hit tokens (real)",
            "false-hit share (sim)",
            "load1",
        ],
        rows,
    )
