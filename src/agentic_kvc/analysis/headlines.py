"""REPORT.md's findings: at most MAX_HEADLINES, ranked by what a reader should take away, one
sentence each with its interval, each labelled simulated or real.

A headline is not typed: each reads one line its study already wrote (findings.json, the same
line the study's section lists) or benchmark JSONs, parses the value and the 95% interval
from it, and words the sentence from them (the verb follows the sign, "not significant"
follows the interval), so a headline and its study cannot disagree. A headline whose source is
missing is left out rather than shown stale. The order is the list's: first the policy to
deploy and its evidence, then what routing buys, then what the design's other mechanisms do,
then the real-engine checks and the simulator's fidelity.

To add one (e.g. for a new study): append a `Headline` to `HEADLINES` with the study's name,
the start of its finding line and a sentence function; keep the rendered list within
MAX_HEADLINES. What the tiers finding's lead needs follows it, from the benchmarks that take a
piece of it away (tiers_link_misspec, tiers_online_cost; read through analysis/bench_summary),
then what an opening rule does where predicted_ttft trails a peer (`OPENING_BENCH`). The
failure modes users report of public routers (`PATHOLOGY_BENCH`) follow the policy's evidence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.core import LayoutError, below_zero
from agentic_kvc.analysis.bench_summary.policies import (
    COLLAPSERS,
    PATHOLOGY_OURS,
    ROBUST_ONLINE,
    pathology_predictions,
    robust_lead,
    robust_metric,
    robust_worse,
)
from agentic_kvc.analysis.bench_summary.render import summarize_file
from agentic_kvc.analysis.bench_summary.tiers import (
    ONLINE_GENERIC,
    TIER_GOAL_SETUP,
    TIERS_UNSEEN,
    TODAY_FORM,
    against_exact_links,
    excludes_zero,
    form_cells,
    form_vs,
    has_tier,
    link_grid,
    other_forms,
    ours_vs_peers,
    tier_gains,
    worst_peer_of_today,
)
from agentic_kvc.analysis.studies.common import WITHIN_SPREAD
from agentic_kvc.analysis.studies.tiers import WORST_SETUP
from agentic_kvc.paired import signed

MAX_HEADLINES = 14
PATHOLOGY_BENCH = "field_pathologies"  # failure modes users report of public routers
OPENING_BENCH = "tiers_opening_near_tie_ttft"  # the opening rule the findings report
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


def _within_spread(v: Value) -> bool:
    """The study found the difference inside the repeats' own spread (max - min over the
    repeats of one variant, against the mean): on a shared machine the runs move that much
    by themselves, so an interval that excludes 0 is not yet a finding."""
    return WITHIN_SPREAD in v.line


SPREAD_WORDS = "within the repeats' own spread, so not a finding at this number of repeats"


def _real(v: Value) -> str:
    if _within_spread(v):
        return (
            "On two real vLLM CPU engines, unified against round-robin, TTFT p50: "
            f"{v.interval()} (paired repeats), {SPREAD_WORDS}."
        )
    return (
        f"On two real vLLM CPU engines unified {v.verb()} TTFT p50 against round-robin "
        f"({v.interval()}, paired repeats)."
    )


def _lifecycle(v: Value) -> str:
    return (
        "On real CPU engines with NIXL, splitting prefill from decode against colocated "
        f"prefill at the grid's largest request, TTFT: {v.interval('ms')}"
        + (f", {SPREAD_WORDS}" if _within_spread(v) else "")
        + "."
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
        _lifecycle,
        unit="ms",
    ),
)


def _bench(paths: Sequence[Path], name: str) -> dict[str, Any] | None:
    for d in paths:
        p = d / f"{name}.json"
        if p.is_file():
            return json.loads(p.read_text())
    return None


def _sweep_value(c: Mapping[str, Any]) -> Value:
    """A paired row of the robustness sweep ({rel_diff, ci_low, ci_high}, fractions) in %."""
    return Value(c["rel_diff"] * 100, c["ci_low"] * 100, c["ci_high"] * 100, "")


def policy_headline(doc: Mapping[str, Any], policy: str = "predicted_ttft") -> str | None:
    """The recommended policy against the best peer on every workload of the robustness
    sweep: how many it is significantly worse on, and its largest significant lead; when the
    sweep also ran it with its step costs fitted online from a generic prior (ROBUST_ONLINE,
    the form a fleet without a profile runs), the same for that form beside it, the first
    being with the simulator's own step costs."""
    scenarios = doc.get("scenarios", [])
    rows = [r for r in scenarios if policy in r]
    if not rows:
        return None
    fitted = [r for r in scenarios if ROBUST_ONLINE in r] if policy == "predicted_ttft" else []
    worse = [n for n, _ in robust_worse(rows, policy)]
    head = (
        f"The recommended policy, {policy}, "
        + ("with the simulator's own step costs, " if fitted else "")
        + f"is significantly worse than the best peer on {len(worse)} of {len(rows)} "
        f"simulated workloads (TTFT or E2E p90, {doc.get('seeds', '?')} paired seeds each)"
        + (f": {', '.join(worse)}" if worse else "")
    )
    if fitted:
        losses = robust_worse(fitted, ROBUST_ONLINE)
        cells = {r["scenario"]: r[ROBUST_ONLINE] for r in fitted}
        listed = "; ".join(
            n
            + " "
            + ", ".join(f"{robust_metric(m)} {_sweep_value(cells[n][m]).interval()}" for m in ms)
            for n, ms in losses
        )
        head += (
            f"; with them fitted online from a generic prior, on {len(losses)} of {len(fitted)}"
            + (f" ({listed})" if losses else "")
        )
    best = robust_lead(rows, policy)
    if best is None:
        return head + ", and leads it significantly on none."
    lead = _sweep_value(best[policy]["ttft_p90"])
    also = ""
    if fitted:
        other = robust_lead(fitted, ROBUST_ONLINE)
        also = "; fitted online, " + (
            "none"
            if other is None
            else _sweep_value(other[ROBUST_ONLINE]["ttft_p90"]).interval()
            + f" on {other['scenario']}"
        )
    return (
        f"{head}; its largest lead is {lead.interval()} TTFT p90 on {best['scenario']} "
        f"(against {best.get('best_peer', 'the best peer')}{also})."
    )


def _either(items: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return " or ".join([", ".join(items[:-1]), items[-1]] if len(items) > 2 else items)


def _value(m: Mapping[str, Any]) -> Value:
    """A benchmark file's paired comparison ({rel, ci, ...}, fractions) as a Value in %."""
    return Value(float(m["rel"]) * 100, float(m["ci"][0]) * 100, float(m["ci"][1]) * 100, "")


def _needs(without: Value, change: Value) -> str:
    """Whether predicted_ttft's lead over the best peer needs a thing, from its lead without
    the thing and its own TTFT p90 change without it: "yes" when the lead is no longer
    significant, "partly" when the lead holds but the change is a significant rise, else "no"."""
    if not (without.significant and without.value < 0):
        return "yes"
    return "partly" if change.significant and change.value > 0 else "no"


def link_lead_setup(doc: Mapping[str, Any]) -> str | None:
    """The setup of predicted_ttft's largest significant TTFT p90 lead over the best peer with
    exact links, among tiers_link_misspec's cells that ran `TIERS_UNSEEN`; None if none."""
    leads = [
        (_value(c["variants"]["exact"]["vs_best_peer"]["ttft_p90"]), name)
        for name, c in (doc.get("cells") or {}).items()
        if TIERS_UNSEEN in c["variants"]
    ]
    leads = [x for x in leads if x[0].significant and x[0].value < 0]
    return min(leads, key=lambda x: x[0].value)[1] if leads else None


def link_clauses(doc: Mapping[str, Any]) -> list[str]:
    """What the tier lead needs, from benchmarks/tiers_link_misspec.py's file: seeing the tiers
    at all (in the setup of its largest significant lead over the best peer, what `TIERS_UNSEEN`
    does) and exact link numbers (how many paired intervals of wrong ones against exact ones
    exclude 0). Empty without wrong-link comparisons."""
    cells = doc.get("cells") or {}
    wrong = against_exact_links(doc) if cells else []
    if not wrong:
        return []
    excl = sum(excludes_zero(m) for c in wrong for m in c.values())
    links = (
        f"exact link numbers, {'yes' if excl else 'no'}: with "
        f"{_either(link_grid(doc)) or 'wrong link numbers'}, {excl} of "
        f"{sum(len(c) for c in wrong)} paired intervals against exact links exclude 0 (TTFT and "
        f"E2E p90, {len(cells)} tiered setups)"
    )
    name = link_lead_setup(doc)
    if name is None:
        return [links]
    cell = cells[name]
    lead = _value(cell["variants"]["exact"]["vs_best_peer"]["ttft_p90"])
    unseen = cell["variants"][TIERS_UNSEEN]
    change = _value(unseen["vs_exact"]["ttft_p90"])
    without = _value(unseen["vs_best_peer"]["ttft_p90"])
    seen = (
        f"seeing the tiers, {_needs(without, change)}: with HBM hits only its TTFT p90 on {name} "
        f"changes by {change.interval()}, and its lead there over "
        f"{cell.get('best_peer', 'the best peer')} from {lead.interval()} to {without.interval()}"
    )
    return [seen, links]


def online_cost_clause(doc: Mapping[str, Any], there: str | None = None) -> str | None:
    """Whether the tier lead needs the simulator's own step costs, from
    benchmarks/tiers_online_cost.py's file: in one tiered setup where today's predicted_ttft
    leads the best peer significantly (`there`, the setup the clause before it speaks of, when
    the file has such a lead there; else the largest such lead), that lead with the costs
    fitted online from a generic prior (`ONLINE_GENERIC`) and what the fit changes; and on how
    many tiered setups that form, and today's, is significantly worse than the best peer. None
    without a significant lead."""
    try:
        cells = {n: c for n, c in form_cells(doc).items() if has_tier(n)}
        peers = {n: worst_peer_of_today(c) for n, c in cells.items()}
        today = {n: _value(form_vs(c, TODAY_FORM, peers[n])) for n, c in cells.items()}
        fitted = {n: _value(form_vs(c, ONLINE_GENERIC, peers[n])) for n, c in cells.items()}
        leads = [n for n, v in today.items() if v.significant and v.value < 0]
        if not leads:
            return None
        name = there if there in leads else min(leads, key=lambda n: today[n].value)
        change = _value(form_vs(cells[name], ONLINE_GENERIC, TODAY_FORM))
    except (LayoutError, KeyError, TypeError, ValueError):
        return None
    worse = [n for n, v in fitted.items() if v.significant and v.value > 0]
    worse_today = sum(v.significant and v.value > 0 for v in today.values())
    listed = ", ".join(f"{n} vs {peers[n]} {fitted[n].interval()}" for n in worse)
    where = "there" if name == there else f"on {name}"
    return (
        f"the simulator's own step costs, {_needs(fitted[name], change)}: fitted online from a "
        f"generic prior instead ({ONLINE_GENERIC}), its TTFT p90 {where} changes by "
        f"{change.interval()}, and its lead over {peers[name]} from {today[name].interval()} to "
        f"{fitted[name].interval()}; so fitted, it is significantly worse than the best peer on "
        f"{len(worse)} of {len(cells)} tiered setups"
        + (f" ({listed})" if listed else "")
        + f", with the simulator's costs on {worse_today}"
    )


def seeds_clause(doc: Mapping[str, Any], cell: str = TIERS_CELL) -> str | None:
    """The tiers finding over more seeds, from benchmarks/tiers_agentic_seeds.py's file (read
    as its summariser reads it: `tier_gains`, `ours_vs_peers`): on `cell` with a 128 GiB host
    tier, the fleet with the tier and its best router against the HBM-only fleet with its best,
    and the same router with and without; in how many tiered setups predicted_ttft is
    significantly worse than the best peer. None if the file lacks them."""
    try:
        (gain,) = [g for g in tier_gains(doc) if g.cell == cell]
        if gain.same_router is None:
            return None
        best, plain = _value(gain.best_vs_best), _value(gain.same_router)
        ours = ours_vs_peers(doc)
        n = len(doc["seeds"])
    except (LayoutError, KeyError, TypeError, ValueError):
        return None
    worse = sum(bool(o.worse()) for o in ours)
    return (
        f"Over {n} seeds (tiers_agentic_seeds) the fleet with that tier and its best router "
        f"({gain.tier_best}) against the HBM-only fleet with its best: {best.interval()}; "
        f"the same router with and without: {plain.interval()}; predicted_ttft significantly "
        f"worse than the best peer in {worse} of {len(ours)} tiered setups there."
    )


def tier_needs_headline(
    links: Mapping[str, Any] | None, online: Mapping[str, Any] | None
) -> str | None:
    """What predicted_ttft's lead over the best peer with KV tiers needs, from the two
    benchmark files that take a piece of it away (either may be missing): seeing the tiers,
    exact link numbers, the simulator's own step costs."""
    clauses = link_clauses(links) if links else []
    there = link_lead_setup(links) if links else None
    fitted = online_cost_clause(online, there) if online else None
    clauses += [fitted] if fitted else []
    if not clauses:
        return None
    return "What predicted_ttft's lead over the best peer with KV tiers needs: " + (
        "; ".join(clauses) + "."
    )


DEPLOYMENTS_BENCH = "tiers_agentic_deployments"  # the tiers file of held-out deployments
PRESSURE_CELL = "KV pressure"  # in its cells' names: load set to the testbed's KV pressure
_FLEET = re.compile(r"on (\d+ x [\w-]+)")


def deployments_headline(doc: Mapping[str, Any]) -> str | None:
    """Whether the host tier's gain carries to deployments no issue names, from
    benchmarks/tiers_agentic_seeds.py's `--part deployments` file (read as its summariser
    reads it): per fleet, the best router with the realistic host tier against the best
    without at the testbed's KV pressure (cells named with `PRESSURE_CELL`), the range over
    the other cells (loads where HBM keeps more of the working set), and on how many tiered
    setups predicted_ttft is significantly worse than the best peer. None without a
    pressure cell."""
    try:
        gains = tier_gains(doc)
        ours = ours_vs_peers(doc)
    except (LayoutError, KeyError, TypeError, ValueError):
        return None
    pressed = [g for g in gains if PRESSURE_CELL in g.cell]
    if not pressed:
        return None
    fleets = []
    for g in pressed:
        fleet = _FLEET.search(g.cell)
        fleets.append(f"{fleet.group(1) if fleet else g.cell} {_value(g.best_vs_best).interval()}")
    rest = sorted(_value(g.best_vs_best).value for g in gains if PRESSURE_CELL not in g.cell)
    span = (
        f"; at lighter loads, where HBM keeps more of the working set, {rest[0]:+.1f}% to "
        f"{rest[-1]:+.1f}%"
        if rest
        else ""
    )
    model = re.search(r"held out: ([\w.-]+) on", pressed[0].cell)
    worse = sum(bool(o.worse()) for o in ours)
    return (
        "Whether a host KV tier's gain carries to fleets the studies were not designed on ("
        + (model.group(1) if model else "another model")
        + " instead of the testbed's model): at the testbed's KV pressure, the best router "
        f"with {TIER_GOAL_SETUP} against the best with HBM only, TTFT p90: {'; '.join(fleets)}"
        f"{span}; predicted_ttft is significantly worse than the best peer with the tier in "
        f"{worse} of {len(ours)} setups."
    )


def _worse_than_peer(cell: Mapping[str, Any], form: str, peer: str) -> bool:
    """Whether `form` is significantly worse than `peer` in the cell on TTFT or E2E p90."""
    return any(
        excludes_zero(m) and float(m["rel"]) > 0
        for m in (form_vs(cell, form, peer, k) for k in ("ttft_p90", "e2e_p90"))
    )


def opening_headline(doc: Mapping[str, Any]) -> str | None:
    """Where predicted_ttft trails a peer with tiers, what an opening rule changes, from an
    opening-rule sweep's file (benchmarks/tiers_opening_*.py; the tiers_online_cost layout with
    one other form): today's worst tiered setup against its best peer (the largest
    significantly worse TTFT p90), the same with the form; on how many tiered setups each is
    significantly worse than the best peer (TTFT or E2E p90); and the form's price, the setups
    where its TTFT p90 is significantly above today's. None unless today trails somewhere."""
    try:
        cells = form_cells(doc)
        (form,) = other_forms(cells)
        tiered = {n: c for n, c in cells.items() if has_tier(n)}
        peers = {n: worst_peer_of_today(c) for n, c in tiered.items()}
        today = {n: _value(form_vs(c, TODAY_FORM, peers[n])) for n, c in tiered.items()}
        trails = [n for n, v in today.items() if v.significant and v.value > 0]
        if not trails:
            return None
        name = max(trails, key=lambda n: today[n].value)
        moved = _value(form_vs(tiered[name], form, peers[name]))
        worse_today = sum(_worse_than_peer(c, TODAY_FORM, peers[n]) for n, c in tiered.items())
        worse_form = sum(_worse_than_peer(c, form, peers[n]) for n, c in tiered.items())
        price = {n: _value(form_vs(c, form, TODAY_FORM)) for n, c in cells.items()}
    except (LayoutError, KeyError, TypeError, ValueError):
        return None
    dearer = [f"{n} {v.interval()}" for n, v in price.items() if v.significant and v.value > 0]
    return (
        "Where predicted_ttft trails a peer with KV tiers, what it misses is where sessions "
        f"open: with openings balanced among near-ties ({form}), its worst tiered setup "
        f"({name} vs {peers[name]}) goes from {today[name].interval()} to {moved.interval()}, "
        f"and it is significantly worse than the best peer (TTFT or E2E p90) on {worse_form} "
        f"of {len(tiered)} tiered setups, against {worse_today} with today's rule; the price: "
        f"its TTFT p90 is significantly above today's rule's on {len(dearer)} of {len(cells)} "
        "setups" + (f" ({', '.join(dearer)})" if dearer else "") + "."
    )


def confirm_clause(doc: Mapping[str, Any] | None) -> str:
    """The confirmatory check's tally (its claims judged as its summariser judges them), as a
    clause for the failure-modes headline; empty without the file."""
    try:
        claims = [
            p
            for r in (doc or {}).get("results", [])
            for p in pathology_predictions(r["kind"], r["policies"], float(r["fair_share"]))
        ]
    except (KeyError, TypeError, ValueError, LayoutError):
        return ""
    if not claims:
        return ""
    return (
        f" A confirmatory check on {len(doc['results'])} more deployments (pre-registered): "  # type: ignore[index]
        f"{sum(p['holds'] for p in claims)} of {len(claims)} claims hold."
    )


def pathology_headline(doc: Mapping[str, Any]) -> str | None:
    """Failure modes users report of public routers, from benchmarks/field_pathologies.py's
    file: how many held-out claims of the registered predictions hold (judged as its
    summariser judges them), the collapse of the first collapser (sglang_cache_aware) where it
    reaches twice the fair share, with its E2E p90 against predicted_ttft, consistent
    hashing's TTFT p90 against predicted_ttft on the held-out spiral scenarios, and in how many
    scenarios predicted_ttft trails a peer. None without a collapse or a spiral scenario."""
    try:
        results = doc["results"]
        judged = [
            p
            for r in results
            if not r["explored_before_registration"]
            for p in pathology_predictions(r["kind"], r["policies"], float(r["fair_share"]))
        ]
        peer = COLLAPSERS[0]
        fair = float(results[0]["fair_share"])
        collapsed = [
            r["policies"][peer]
            for r in results
            if r["kind"] == "collapse"
            and float(r["policies"][peer]["busiest_request_share"]) >= 2 * fair
        ]
        spirals = [
            (r["scenario"], _sweep_value(r["policies"]["consistent_hash"]["vs_ours"]["ttft_p90"]))
            for r in results
            if r["kind"] == "spiral" and not r["explored_before_registration"]
        ]
        behind = {
            r["scenario"]
            for r in results
            for s in r["policies"].values()
            for m in ("ttft_p90", "e2e_p90")
            if m in s.get("vs_ours", {}) and below_zero(s["vs_ours"][m])  # the peer ahead
        }
    except (KeyError, TypeError, ValueError, IndexError, LayoutError):
        return None
    if not collapsed or not spirals:
        return None
    shares = sorted(float(c["busiest_request_share"]) for c in collapsed)
    e2e = sorted((_sweep_value(c["vs_ours"]["e2e_p90"]) for c in collapsed), key=lambda v: v.value)
    n = round(1 / fair)
    return (
        "Failure modes users report of public routers, in the simulator (pre-registered; "
        f"{sum(p['holds'] for p in judged)} of {len(judged)} held-out claims hold): a shared "
        f"system prompt puts {shares[0]:.0%}-{shares[-1]:.0%} of the requests on one of {n} "
        f"instances under {peer} in {len(collapsed)} of "
        f"{sum(r['kind'] == 'collapse' for r in results)} scenarios (E2E p90 against "
        f"{PATHOLOGY_OURS} {e2e[0].interval()} to {e2e[-1].interval()}); consistent hashing's "
        f"TTFT p90 against {PATHOLOGY_OURS} where sessions outgrow the KV (held out): "
        + "; ".join(f"{name} {v.interval()}" for name, v in spirals)
        + f"; {PATHOLOGY_OURS} is significantly behind a peer (TTFT or E2E p90) in "
        f"{len(behind)} of {len(results)} scenarios."
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
    doc = _bench(bench_dirs, PATHOLOGY_BENCH)
    text = pathology_headline(doc) if doc else None
    if text:
        text += confirm_clause(_bench(bench_dirs, f"{PATHOLOGY_BENCH}_confirm"))
        out.append(Rendered("simulated", f"bench-{PATHOLOGY_BENCH}", text))
    for h in headlines:
        lines = [_line(findings.get(h.study, ()), src) for src in h.sources]
        values = [parse(x, h.unit) if x else None for x in lines]
        if all(v is not None for v in values):
            words = h.words(*values)
            seeds = _bench(bench_dirs, "tiers_agentic_seeds") if h.study == "tiers" else None
            more = seeds_clause(seeds) if seeds else None
            out.append(Rendered(h.label, h.study, f"{words} {more}" if more else words))
            deployed = _bench(bench_dirs, DEPLOYMENTS_BENCH) if h.study == "tiers" else None
            text = deployments_headline(deployed) if deployed else None
            if text:
                out.append(Rendered("simulated", f"bench-{DEPLOYMENTS_BENCH}", text))
            if h.study == "tiers":  # what the tiers finding's lead needs, right after it
                links = _bench(bench_dirs, "tiers_link_misspec")
                online = _bench(bench_dirs, "tiers_online_cost")
                text = tier_needs_headline(links, online)
                if text:
                    src = "tiers_link_misspec" if links else "tiers_online_cost"
                    out.append(Rendered("simulated", f"bench-{src}", text))
                opening = _bench(bench_dirs, OPENING_BENCH)
                text = opening_headline(opening) if opening else None
                if text:
                    out.append(Rendered("simulated", f"bench-{OPENING_BENCH}", text))
    text = fidelity_headline(bench_dirs)
    if text:
        out.append(Rendered("simulated vs real", "bench-sim_vs_vllm", text))
    return out[:MAX_HEADLINES]
