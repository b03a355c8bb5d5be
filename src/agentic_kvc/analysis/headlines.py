"""REPORT.md's findings: at most ten, ranked by what a reader should take away, one sentence
each with its interval, each labelled simulated or real.

A headline is not typed: each reads one line its study already wrote (findings.json, the same
line the study's section lists) or one benchmark JSON, parses the value and the 95% interval
from it, and words the sentence from them (the verb follows the sign, "not significant"
follows the interval), so a headline and its study cannot disagree. A headline whose source is
missing is left out rather than shown stale. The order is the list's: first the policy to
deploy and its evidence, then what routing buys, then what the design's other mechanisms do,
then the real-engine checks and the simulator's fidelity.

To add one (e.g. for a new study): append a `Headline` to `HEADLINES` with the study's name,
the start of its finding line and a sentence function; keep the list at ten or fewer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary import (
    TIERS_UNSEEN,
    against_exact_links,
    excludes_zero,
    link_grid,
    summarize_file,
)
from agentic_kvc.analysis.studies.tiers import WORST_SETUP
from agentic_kvc.paired import signed

MAX_HEADLINES = 11
_NUM = r"([+-]?\d+(?:\.\d+)?)"
_PCT = re.compile(rf"{_NUM}% \[{_NUM}, {_NUM}\]")
_MS = re.compile(rf"{_NUM} ms \[{_NUM}, {_NUM}\]")


@dataclass(slots=True, frozen=True)
class Value:
    """A parsed difference: the value and its 95% interval, in the line's unit (% or ms)."""

    value: float
    lo: float
    hi: float
    line: str

    @property
    def significant(self) -> bool:
        return not (self.lo <= 0 <= self.hi)

    def interval(self, unit: str = "%") -> str:
        sep = "" if unit == "%" else " "
        return f"{signed(self.value)}{sep}{unit} [{signed(self.lo)}, {signed(self.hi)}]" + (
            "" if self.significant else ", not significant"
        )

    def verb(self, lower: str = "lowers", higher: str = "raises") -> str:
        if not self.significant:
            return "does not significantly change"
        return lower if self.value < 0 else higher


def parse(line: str, unit: str = "%") -> Value | None:
    m = (_PCT if unit == "%" else _MS).search(line)
    return None if m is None else Value(*(float(g) for g in m.groups()), line=line)


@dataclass(slots=True, frozen=True)
class Headline:
    """One ranked finding: where its numbers come from (the starts of the study's finding
    lines, all needed) and how they are worded."""

    label: str  # "simulated" or "real"
    study: str  # the section it summarises (its findings.json, and the link)
    sources: tuple[str, ...]
    words: Callable[..., str]  # one Value per source
    unit: str = "%"


@dataclass(slots=True, frozen=True)
class Rendered:
    label: str
    study: str
    text: str


def _line(findings: Sequence[str], prefix: str) -> str | None:
    return next((f for f in findings if f.startswith(prefix)), None)


def _peers(v: Value) -> str:
    lead = "No single rule wins everywhere: " if v.significant and v.value > 0 else ""
    return (
        f"{lead}on the public Mooncake conversation trace unified against the best policy "
        f"there (additive), TTFT p90: {v.interval()}."
    )


def _adaptive(v: Value) -> str:
    reverse = (
        ", the reverse of the design's expectation (the section shows the transfer's share)"
        if v.significant and v.value > 0
        else ""
    )
    return (
        "Moving HEAVY prefills to another instance with a KV transfer (adaptive v2) "
        f"{v.verb()} their TTFT p90 against combined instances ({v.interval()}){reverse}."
    )


def _elastic(always: Value, never: Value) -> str:
    return (
        "Elastic offload at the highest load "
        f"{always.verb()} TTFT p90 against always offloading ({always.interval()}) and "
        f"{never.verb()} it against never offloading, the stronger bound ({never.interval()})."
    )


def _real(v: Value) -> str:
    spread = "; within the repeats' own spread" if "within the repeats" in v.line else ""
    return (
        f"On two real vLLM CPU engines unified {v.verb()} TTFT p50 against round-robin "
        f"({v.interval()}, paired repeats{spread})."
    )


def _tiers(gain: Value, ours: Value, worst: Value) -> str:
    peer = re.search(r"vs best peer (\S+),", ours.line)
    where = re.search(r"against the best peer \((.*)\), TTFT p90:", worst.line)
    return (
        "When HBM cannot hold the paused sessions of a long-context coding agent, a 128 GiB "
        f"host KV tier {gain.verb()} the TTFT p90 of the router that is best without it "
        f"({gain.interval()}); there, pricing each tier's reload by time (predicted_ttft) "
        f"against the best peer ({peer.group(1) if peer else 'the best peer'}): "
        f"{ours.interval()}; across the study's tiered setups its worst against the best peer "
        f"({where.group(1) if where else 'one setup'}): {worst.interval()}."
    )


TIERS_CELL = "agentic-long, heavy-tailed pauses, 0.1 sessions/s"

HEADLINES: tuple[Headline, ...] = (
    Headline(
        "simulated",
        "tiers",
        (
            f"{TIERS_CELL}: + host 128 GiB vs HBM only (best HBM-only peer):",
            f"{TIERS_CELL}, host 128 GiB: predicted_ttft vs best peer",
            WORST_SETUP,
        ),
        _tiers,
    ),
    Headline(
        "simulated",
        "evolution",
        ("unified vs round_robin, TTFT p90:",),
        lambda v: (
            "Routing on the session's cache and the instances' load together (unified) "
            f"{v.verb()} TTFT p90 against round-robin on the coding-agent workload: "
            f"{v.interval()}."
        ),
    ),
    Headline("simulated", "peers", ("unified vs best (additive) on mooncake, TTFT p90:",), _peers),
    Headline(
        "simulated",
        "static_pd",
        ("static 6P+2D vs combined + lmetric, TTFT p90:",),
        lambda v: (
            f"A static split into 6 prefill and 2 decode instances {v.verb()} TTFT p90 "
            f"against 8 combined instances ({v.interval()})."
        ),
    ),
    Headline(
        "simulated", "adaptive", ("D: adaptive v2 (KV transfer) vs A, HEAVY TTFT p90:",), _adaptive
    ),
    Headline(
        "simulated",
        "elastic_load",
        (
            "elastic vs always offload at 2 sessions/s, TTFT p90:",
            "elastic vs never offload at 2 sessions/s, TTFT p90:",
        ),
        _elastic,
    ),
    Headline("real", "real", ("real engines: unified vs round_robin, TTFT p50:",), _real),
    Headline(
        "real",
        "lifecycle",
        ("Lifecycle: PD - colocated TTFT at (C, N, O) max:",),
        lambda v: (
            "On real CPU engines with NIXL, splitting prefill from decode against colocated "
            f"prefill at the grid's largest request, TTFT: {v.interval('ms')}"
            + ("; within the repeats' own spread" if "within the repeats" in v.line else "")
            + "."
        ),
        unit="ms",
    ),
)


def _bench(paths: Sequence[Path], name: str) -> dict[str, Any] | None:
    for d in paths:
        p = d / f"{name}.json"
        if p.is_file():
            return json.loads(p.read_text())
    return None


def policy_headline(doc: Mapping[str, Any], policy: str = "predicted_ttft") -> str | None:
    """The recommended policy against the best peer on every workload of the robustness
    sweep: how many it is significantly worse on, and its largest significant lead."""
    rows = [r for r in doc.get("scenarios", []) if policy in r]
    if not rows:
        return None
    worse = [
        r["scenario"]
        for r in rows
        if any(float(r[policy][m]["ci_low"]) > 0 for m in ("ttft_p90", "e2e_p90"))
    ]
    leads = [
        r
        for r in rows
        if float(r[policy]["ttft_p90"]["ci_high"]) < 0
        and float(r[policy]["e2e_p90"]["ci_low"]) <= 0
    ]
    best = min(leads, key=lambda r: float(r[policy]["ttft_p90"]["rel_diff"]), default=None)
    head = (
        f"The recommended policy, {policy}, is significantly worse than the best peer on "
        f"{len(worse)} of {len(rows)} simulated workloads (TTFT or E2E p90, "
        f"{doc.get('seeds', '?')} paired seeds each)"
        + (f": {', '.join(sorted(worse))}" if worse else "")
    )
    if best is None:
        return head + ", and leads it significantly on none."
    t = best[policy]["ttft_p90"]
    lead = Value(t["rel_diff"] * 100, t["ci_low"] * 100, t["ci_high"] * 100, "")
    return (
        f"{head}; its largest lead is {lead.interval()} TTFT p90 on {best['scenario']} "
        f"(against {best.get('best_peer', 'the best peer')})."
    )


def _either(items: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return " or ".join([", ".join(items[:-1]), items[-1]] if len(items) > 2 else items)


def link_headline(doc: Mapping[str, Any]) -> str | None:
    """What predicted_ttft's tier pricing needs (benchmarks/tiers_link_misspec.py): how many
    paired intervals of wrong link numbers against exact ones exclude 0, and, in the setup of
    its largest significant lead over the best peer, what not seeing the tiers does."""

    def value(m: Mapping[str, Any]) -> Value:
        return Value(m["rel"] * 100, m["ci"][0] * 100, m["ci"][1] * 100, "")

    cells = doc.get("cells") or {}
    wrong = against_exact_links(doc) if cells else []
    if not wrong:
        return None
    excl = sum(excludes_zero(m) for c in wrong for m in c.values())
    head = (
        f"predicted_ttft's tier pricing {'does not need' if not excl else 'depends on'} exact "
        f"link numbers: with {_either(link_grid(doc)) or 'wrong link numbers'}, {excl} of "
        f"{sum(len(c) for c in wrong)} paired intervals against exact links exclude 0 (TTFT and "
        f"E2E p90, {len(cells)} tiered setups)"
    )
    leads = [
        (value(c["variants"]["exact"]["vs_best_peer"]["ttft_p90"]), name, c)
        for name, c in cells.items()
        if TIERS_UNSEEN in c["variants"]
    ]
    leads = [x for x in leads if x[0].significant and x[0].value < 0]
    if not leads:
        return head + "."
    lead, name, cell = min(leads, key=lambda x: x[0].value)
    unseen = cell["variants"][TIERS_UNSEEN]
    return (
        f"{head}; not seeing the tiers at all (HBM hits only) changes its TTFT p90 on {name} by "
        f"{value(unseen['vs_exact']['ttft_p90']).interval()}, and its lead there over "
        f"{cell.get('best_peer', 'the best peer')} from {lead.interval()} to "
        f"{value(unseen['vs_best_peer']['ttft_p90']).interval()}."
    )


def fidelity_headline(bench_dirs: Sequence[Path]) -> str | None:
    """The simulator against repeated real runs, each session's envelope check (benchmark
    files sim_vs_vllm*.json: the session, checks inside, the bar a model with no error meets)."""
    seen: dict[str, str] = {}
    for d in bench_dirs:
        for path in sorted(d.glob("sim_vs_vllm*.json")):
            if path.stem in seen:
                continue  # this checkout's own run replaces the archived one
            row = next(
                (r for r in summarize_file(path) if "checks in the envelope" in r.measure),
                None,
            )
            if row is not None:
                seen[path.stem] = f"{path.stem}: {row.value.split(';')[0]} ({row.verdict})"
    if not seen:
        return None
    return (
        "The simulator against repeated real vLLM CPU runs, checks of TTFT/E2E inside the "
        "repeats' envelope per session (goal: what a model with no error passes in 95% of "
        "sessions): " + "; ".join(seen[k] for k in sorted(seen)) + "."
    )


def render_headlines(
    findings: Mapping[str, Sequence[str]],
    bench_dirs: Sequence[Path],
    headlines: Sequence[Headline] = HEADLINES,
) -> list[Rendered]:
    """The ranked findings whose sources are present: the policy's evidence first, then
    `headlines` in order, the simulator's fidelity last; at most MAX_HEADLINES."""
    out: list[Rendered] = []
    doc = _bench(bench_dirs, "policy_robustness")
    text = policy_headline(doc) if doc else None
    if text:
        out.append(Rendered("simulated", "bench-policy_robustness", text))
    for h in headlines:
        lines = [_line(findings.get(h.study, ()), src) for src in h.sources]
        values = [parse(x, h.unit) if x else None for x in lines]
        if all(v is not None for v in values):
            out.append(Rendered(h.label, h.study, h.words(*values)))
            if h.study == "tiers":  # what the tiers finding's pricing needs, right after it
                links = _bench(bench_dirs, "tiers_link_misspec")
                text = link_headline(links) if links else None
                if text:
                    out.append(Rendered("simulated", "bench-tiers_link_misspec", text))
    text = fidelity_headline(bench_dirs)
    if text:
        out.append(Rendered("simulated vs real", "bench-sim_vs_vllm", text))
    return out[:MAX_HEADLINES]
