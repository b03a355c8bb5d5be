"""Summaries of the KV-tier benchmarks (issue 29): the simulator's cost with tiers on, and
what predicted_ttft's standing against the best peer needs (link numbers, seeing the tiers,
the step costs, where sessions open; goals 1 and 2 over many seeds)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    MET,
    NOT_MEASURED,
    NOT_MET,
    Fig,
    LayoutError,
    above_zero,
    below_zero,
    field_at,
    num,
    paired_cell,
    pct,
    summariser,
    verdict_of,
)
from agentic_kvc.analysis.bench_summary.engine_variant import (
    listed,
    pick,
    real_load,
    replicate_spread,
    variant_names,
)
from agentic_kvc.analysis.studies.tiers import HBM_ONLY

TIERS_OVERHEAD_GOAL = 1.5  # issue 29


@summariser("sim_tiers_overhead", "the simulator's CPU time with KV tiers on, against HBM only")
def _sim_tiers_overhead(doc: dict[str, Any]) -> list[Fig]:
    """The worst row's ratio against the goal (every row must meet it), then the median and
    the engine's tiers alone (the router's view built as without tiers), without a goal."""
    goal = float(doc.get("parameters", {}).get("goal_cpu_ratio", TIERS_OVERHEAD_GOAL))
    rows = field_at(doc, "results")
    if not rows:
        return [Fig("tiers on / HBM only, CPU time", "-", f"<= {num(goal)}x", NOT_MEASURED)]

    def ratio(r: dict[str, Any]) -> float:
        return float(field_at(r, "tiers", "cpu_s")) / float(field_at(r, "hbm_only", "cpu_s"))

    def name(r: dict[str, Any]) -> str:
        return f"{field_at(r, 'config')}, {field_at(r, 'policy')}, seed {field_at(r, 'seed')}"

    worst = max(rows, key=ratio)
    ratios = sorted(ratio(r) for r in rows)
    mid = len(ratios) // 2
    median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    out = [
        Fig(
            f"tiers on / HBM only, CPU time: worst of {len(rows)} runs",
            f"{num(ratio(worst))}x ({name(worst)}: {num(float(worst['hbm_only']['cpu_s']))} "
            f"-> {num(float(worst['tiers']['cpu_s']))} s)",
            f"<= {num(goal)}x",
            verdict_of(ratio(worst) <= goal),
        ),
        Fig("tiers on / HBM only, CPU time: median", f"{num(median)}x"),
    ]
    engine = [float(r["engine_cpu_ratio"]) for r in rows if r.get("engine_cpu_ratio")]
    if engine:
        out.append(
            Fig(
                "the engine's tiers alone (router's view as HBM only): worst / median",
                f"{num(max(engine))}x / {num(sorted(engine)[len(engine) // 2])}x",
            )
        )
    return out


@summariser(
    "tier_recency_real",
    "which end of a prompt a real vLLM host tier evicts first: loaded against never loaded",
)
def _tier_recency_real(doc: dict[str, Any]) -> list[Fig]:
    """The simulator's reading of vLLM's SimpleCPUOffloadConnector (cache/tier_store.py,
    `simple_lru`) against a real engine: a prompt loaded from the host tier loses its head
    first (keeps a suffix), one never loaded its tail first (keeps a prefix)."""
    n = int(field_at(doc, "prompt_blocks"))
    out = []
    for key, label, want in (
        ("loaded_prompt_A", "a prompt loaded from the host tier", "suffix"),
        ("never_loaded_prompt_B", "a prompt never loaded", "prefix"),
    ):
        got = field_at(doc, key)
        measure = f"{label}: what the tier kept when it had evicted part of it"
        goal = f"a {want} (its {'head' if want == 'suffix' else 'tail'} went first)"
        if got is None:
            out.append(Fig(measure, "never partly evicted", goal, NOT_MEASURED))
            continue
        value = f"a {got['shape']}: {got['kept']} of {n} blocks (after {got['step']})"
        out.append(Fig(measure, value, goal, verdict_of(got["shape"] == want)))
    out.append(Fig("engine", f"vLLM {doc.get('vllm')}, {doc.get('processor')}"))
    return out


def _view_follows_tier(measure: str, v: Mapping[str, Any], detail: str) -> Fig:
    """A view's host tokens expected over those the engines' host tiers served (`v`: the
    `expected_over_served` ratio of all runs and its range over runs), against the 0.8-1.2 band
    of docs/kv_tiers_real.md section 8; `detail` follows the range."""
    ratio = v.get("expected_over_served")
    if ratio is None:
        return Fig(measure, "the tier served nothing", "0.8-1.2", NOT_MEASURED)
    rng = f"{num(v['expected_over_served_min'])}-{num(v['expected_over_served_max'])}"
    return Fig(
        measure, f"{num(ratio)} (runs {rng}; {detail})", "0.8-1.2", verdict_of(0.8 <= ratio <= 1.2)
    )


@summariser(
    "tier_view_real",
    "whether a router without KV events follows a real engine's host tier (the estimated view)",
)
def _tier_view_real(doc: dict[str, Any]) -> list[Fig]:
    """The pre-registered rule (docs/kv_tiers_real.md, section 8): the view's expected host
    tokens over what the engines' host tiers served, within 0.8-1.2 over all runs, for the
    estimated view with the engines' tier and for the exact view beside it; then the tokens each
    view expected and the engines did not serve (and the reverse), and TTFT between them."""
    per = field_at(doc, "per_view")
    out = []
    for view, label in (("estimated", "estimated view (--tier-view)"), ("exact", "exact view")):
        v = per[view]
        measure = f"{label}: host tokens expected / served by the engines ({v['runs']} runs)"
        served = f"the tier served {pct(v['engine_host_share'])} of prompt tokens"
        out.append(_view_follows_tier(measure, v, served))
        if v.get("expected_over_served") is None:
            continue
        out.append(
            Fig(
                f"{label}: cached tokens expected and not served / served and not expected",
                f"{pct(v['expected_not_served'] / max(v['cached_tokens'], 1))} / "
                f"{pct(v['served_not_expected'] / max(v['cached_tokens'], 1))} of the "
                f"engines' cached tokens; {v['requests_expected_exactly']} of "
                f"{v['requests']} requests exactly",
            )
        )
    for metric in ("ttft_p50", "ttft_p90"):
        r = field_at(doc, "estimated_vs_exact", metric)
        note = (
            " n.s."
            if not r["significant"]
            else ("" if r["beyond_spread"] else " (within the repeats' spread)")
        )
        out.append(Fig(f"{metric}, estimated vs exact view", paired_cell(r) + note))
    return out


@summariser(
    "tier_store_timing_real",
    "when a real vLLM host tier in lazy mode stores a prompt's blocks: at eviction or once freed",
)
def _tier_store_timing_real(doc: dict[str, Any]) -> list[Fig]:
    """The simulator's store-on-eviction tiers (`write_through: false`) against vLLM 0.32's lazy
    walk on a real engine: the host tier should hold all of prompt A once HBM has evicted it.
    Where the walk is shorter than the pool it stores one walk of A (its tail) and no more."""
    n = int(field_at(doc, "prompt_blocks"))
    engine = field_at(doc, "engine")
    walk = int(engine["lazy_walk_blocks"])
    blocks = -(-int(engine["kv_cache_tokens"]) // int(engine["block_size"]))
    kept = doc.get("a_host_after_eviction")
    shape = next((s.get("a_host_shape") for s in field_at(doc, "steps") if s["a_hbm"] == 0), None)
    measure = f"a {n}-block prompt's blocks in the host tier once HBM evicted it"
    goal = f"all {n} (the simulator stores at eviction)"
    return [
        Fig(measure, "HBM never evicted it", goal, NOT_MEASURED)
        if kept is None
        else Fig(
            measure,
            f"{kept} of {n}" + (f" (a {shape})" if shape and 0 < kept < n else ""),
            goal,
            verdict_of(int(kept) == n),
        ),
        Fig(
            "stored while HBM still held all of it",
            f"yes, at {doc['stored_ahead_of_eviction_at']}"
            if doc.get("stored_ahead_of_eviction_at")
            else "no",
        ),
        Fig(
            "engine",
            f"lazy walk {walk} blocks per step over {blocks} HBM blocks "
            f"(max_num_batched_tokens {engine['max_num_batched_tokens']})"
            + (
                f", stores reported in flight to {engine['store_polls']} worker poll(s)"
                " (as asynchronous copies)"
                if engine.get("store_polls")
                else ""
            )
            + "; "
            f"vLLM {doc.get('vllm')}, {doc.get('processor')}",
        ),
    ]


@summariser(
    "tier_store_race_real",
    "whether a real vLLM lazy host tier stores a finished prompt that a waiting request needs",
)
def _tier_store_race_real(doc: dict[str, Any]) -> list[Fig]:
    """vLLM 0.32 allocates a step's blocks before its lazy walk stores the freed ones, so a
    request admitted in the step after another finishes takes that one's blocks unstored; the
    simulator's walk-covers-the-pool tiers model that order (docs/kv_tiers.md). Per row the
    engine's step trace (`--trace`) says whether B waited in the engine and how many of A's
    prompt blocks it took unstored; the step order predicts the host tier keeps the rest, and
    all of A in `sequential` rows and wherever B did not wait."""
    rows = field_at(doc, "results")
    if not rows or any("steps" not in r for r in rows):
        return [
            Fig("rows with the engine's step trace", "none (run with --trace)", "-", NOT_MEASURED)
        ]
    n = int(rows[0]["a_blocks"])
    waited = [r for r in rows if r["mode"] == "waiting" and r["steps"]["b_failed_tries"] > 0]
    whole = [r for r in rows if r not in waited]
    expect = [n - int(r["steps"]["a_taken_unstored_by_b"]) for r in waited]
    held = [int(r["a_host"]) for r in waited]
    return [
        Fig(
            "B waited in the engine: A's blocks in the host tier (predicted: those B did not take)",
            (f"{', '.join(map(str, held))} of {n}; predicted {', '.join(map(str, expect))}")
            if waited
            else "B never waited",
            "as predicted in every row",
            verdict_of(held == expect) if waited else NOT_MEASURED,
        ),
        Fig(
            "nothing waiting (sequential, or B came after A's release): A whole in the host tier",
            f"{sum(int(r['a_host']) == n for r in whole)} of {len(whole)} rows",
            "every row",
            verdict_of(all(int(r["a_host"]) == n for r in whole)),
        ),
        Fig(
            "waiting rows where B reached the engine only after A's release (client-side delay)",
            f"{sum(r['mode'] == 'waiting' for r in whole)} of "
            f"{sum(r['mode'] == 'waiting' for r in rows)}",
        ),
    ]


@summariser(
    "tier_view_sim",
    "the real engines' tier-view check in the simulator, with and without vLLM's step order",
)
def _tier_view_sim(doc: dict[str, Any]) -> list[Fig]:
    """benchmarks/tier_view_sim.py: per lazy-store rule and view, the host tokens the view
    expected over those the simulated engines served (tier_view_real's 0.8-1.2 band, read as
    there), and the whole expectation's errors. No goal of its own: whether the step order
    (`walk`) reproduces the real estimate's over-expectation, and `free` (store at free, the
    estimate's own rule) does not."""
    out = []
    for cell, v in field_at(doc, "per_cell").items():
        store, view = cell.split("/")
        rule = "after the next step's allocations (vLLM)" if store == "walk" else "when freed"
        measure = f"{view} view, engines storing {rule}: host tokens expected / served"
        detail = (
            f"expected and not served {pct(v['expected_not_served_share'])}, served and not "
            f"expected {pct(v['served_not_expected_share'])} of cached tokens; the tier served "
            f"{pct(v['engine_host_share'])} of prompt tokens"
        )
        out.append(_view_follows_tier(measure, v, detail))
    return out


# benchmarks/tiers_link_misspec.py's file is read by its summariser here, by the ranked findings
# (analysis/headlines.py) and by the script for its own top-level figures: one reading.

TIERS_UNSEEN = "tiers_unseen"  # its variant with the tiers not seen at all: not a link variant


def excludes_zero(m: Mapping[str, Any]) -> bool:
    """A paired comparison ({rel, ci, ...}) whose interval does not contain 0."""
    lo, hi = (float(x) for x in field_at(m, "ci"))
    return not lo <= 0 <= hi


def _interval(m: Mapping[str, Any]) -> str:
    """A paired comparison as "+13.0% [+6.0%, +24.0%]"."""
    lo, hi = (pct(float(x), sign=True) for x in field_at(m, "ci"))
    return f"{pct(float(field_at(m, 'rel')), sign=True)} [{lo}, {hi}]"


def against_exact_links(doc: Mapping[str, Any], links: bool = True) -> list[dict[str, Any]]:
    """Every cell's comparisons against exact links (each {metric: {rel, ci, ...}}): those of
    the wrong-link variants, or (`links` False) those of `TIERS_UNSEEN`."""
    return [
        v["vs_exact"]
        for cell in field_at(doc, "cells").values()
        for label, v in field_at(cell, "variants").items()
        if "vs_exact" in v and (label != TIERS_UNSEEN) == links
    ]


def link_grid(doc: Mapping[str, Any]) -> list[str]:
    """The wrong link numbers the file's variants set, in words, read from their labels."""
    labels = {lab for cell in field_at(doc, "cells").values() for lab in field_at(cell, "variants")}
    scales = sorted(float(lab[4:]) for lab in labels if lab.startswith("bw_x"))
    grid = [f"the host and disk read bandwidth x{scales[0]:g} to x{scales[-1]:g}"] if scales else []
    grid += [f"their latencies x{lab[5:]}" for lab in sorted(labels) if lab.startswith("lat_x")]
    return grid + (["a free reload"] if "no_reload" in labels else [])


@summariser(
    "tiers_link_misspec",
    "predicted_ttft with wrong tier link numbers, and not seeing the tiers at all (sim)",
)
def _tiers_link_misspec(doc: dict[str, Any]) -> list[Fig]:
    """Wrong link numbers against exact ones (how many paired intervals exclude 0), the lead
    over each cell's best peer with exact links and its range over the wrong ones, and what
    not seeing the tiers (`TIERS_UNSEEN`) does against exact links, per cell."""
    leads, unseen = [], []
    for name, cell in field_at(doc, "cells").items():
        variants = field_at(cell, "variants")
        wrong = [v for k, v in variants.items() if "vs_exact" in v and k != TIERS_UNSEEN]
        exact = field_at(variants, "exact", "vs_best_peer", "ttft_p90")
        if excludes_zero(exact) and float(exact["rel"]) < 0:
            rels = [float(field_at(v, "vs_best_peer", "ttft_p90", "rel")) for v in wrong]
            held = all(excludes_zero(field_at(v, "vs_best_peer", "ttft_p90")) for v in wrong)
            leads.append(
                f"{name} vs {field_at(cell, 'best_peer')} {pct(float(exact['rel']), sign=True)} "
                f"({pct(min(rels), sign=True)} to {pct(max(rels), sign=True)}"
                f"{'' if held else ', not always significant'})"
            )
        if TIERS_UNSEEN in variants:
            m = field_at(variants, TIERS_UNSEEN, "vs_exact", "ttft_p90")
            unseen.append(f"{name} {_interval(m)}{'' if excludes_zero(m) else ' n.s.'}")
    vs = against_exact_links(doc)
    excl = sum(excludes_zero(m) for c in vs for m in c.values())
    largest = max((abs(float(field_at(c, "ttft_p90", "rel"))) for c in vs), default=0.0)
    out = [
        Fig(
            f"wrong link numbers ({'; '.join(link_grid(doc)) or 'none'}) against exact: "
            "paired intervals excluding 0 (TTFT and E2E p90)",
            f"{excl} of {sum(len(c) for c in vs)} (largest TTFT p90 change {pct(largest)})",
        ),
        Fig(
            "significant TTFT p90 leads over the best peer, exact links (range with wrong ones)",
            "; ".join(leads) or "none",
        ),
    ]
    if unseen:
        out.append(
            Fig("tiers not seen (tier_pricing off) against exact, TTFT p90", "; ".join(unseen))
        )
    return out


# benchmarks/tiers_online_cost.py's file: one entry per cell, keyed "<workload>/host_<GiB>"
# (or "host_16+disk"), holding paired comparisons "<ours>_vs_<other>" ({metric: {rel, ci, pairs}})
# of today's predicted_ttft ("today", cost_model: profile, the simulator's own step costs), its
# online-fitted forms ("<form>_vs_today") and the study's peers ("today_vs_<peer>"). Read here
# by its summariser and by the ranked findings (analysis/headlines.py): one reading. The same
# layout, with other forms of predicted_ttft, is written by the opening-rule sweeps
# (benchmarks/tiers_opening_*.py), so the helpers below are named by form, not by fit.

TODAY_FORM = "today"  # predicted_ttft as the studies run it: the profile's step costs
ONLINE_GENERIC = "online_generic"  # fitted online from a generic prior: the honest form
HBM_ONLY_SUFFIX = "/host_0"  # a cell with no tier below HBM


def form_cells(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The file's cells: its entries that compare today's predicted_ttft with a peer."""
    cells = {
        name: c
        for name, c in doc.items()
        if isinstance(c, Mapping) and any(k.startswith(f"{TODAY_FORM}_vs_") for k in c)
    }
    if not cells:
        raise LayoutError(f"no cell with a {TODAY_FORM}_vs_<peer> comparison")
    return cells


def other_forms(cells: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The online-fitted forms the file compares with today's, from its labels."""
    suffix = f"_vs_{TODAY_FORM}"
    return sorted({k.removesuffix(suffix) for c in cells.values() for k in c if k.endswith(suffix)})


def has_tier(name: str) -> bool:
    """Whether the cell has a tier below HBM (its key does not end in host_0)."""
    return not name.endswith(HBM_ONLY_SUFFIX)


def worst_peer_of_today(cell: Mapping[str, Any]) -> str:
    """The peer today's predicted_ttft does worst against on TTFT p90 (the benchmark's pick)."""
    prefix = f"{TODAY_FORM}_vs_"
    peers = [k.removeprefix(prefix) for k in cell if k.startswith(prefix)]
    return max(peers, key=lambda p: float(field_at(cell, prefix + p, "ttft_p90", "rel")))


def form_vs(
    cell: Mapping[str, Any], ours: str, other: str, metric: str = "ttft_p90"
) -> Mapping[str, Any]:
    """One paired comparison of the cell: `ours` against `other` on `metric`."""
    return field_at(cell, f"{ours}_vs_{other}", metric)  # type: ignore[no-any-return]


@summariser(
    "tiers_online_cost",
    "predicted_ttft with its step costs fitted online, against the best peer and today's (sim)",
)
def _tiers_online_cost(doc: dict[str, Any]) -> list[Fig]:
    return forms_against_today(doc, "the simulator's own step costs")


# benchmarks/tiers_opening_near_tie_ttft.py's file: the same layout, one form (near_tie_ttft:
# session openings balanced among near-ties) against today's predicted_ttft and the peers, on
# the tiers study's cells and held-out ones (docs/kv_tiers/study_followups.md, TraceLab 10).
@summariser(
    "tiers_opening_near_tie_ttft",
    "predicted_ttft with session openings balanced among near-ties, against the best peer and "
    "today's (sim)",
)
def _tiers_opening_near_tie(doc: dict[str, Any]) -> list[Fig]:
    return forms_against_today(doc, "today's opening rule")


def forms_against_today(doc: Mapping[str, Any], today_is: str) -> list[Fig]:
    """Each form (today's, then each other one) against each cell's best peer, and each other
    form against today's (`today_is` says what today's form is): per metric, how many cells'
    paired intervals exclude 0 (how many of them lower), and those cells with their intervals;
    the others are not significant."""
    cells = form_cells(doc)
    forms = other_forms(cells)
    runs = sum(int(c.get("runs", 0)) for c in cells.values())

    def significant(ours: str, best_peer: bool) -> str:
        parts = []
        for metric, words in (("ttft_p90", "TTFT p90"), ("e2e_p90", "E2E p90")):
            hits: list[tuple[float, str]] = []
            for name, c in cells.items():
                other = worst_peer_of_today(c) if best_peer else TODAY_FORM
                m = form_vs(c, ours, other, metric)
                if excludes_zero(m):
                    where = f"{name} vs {other}" if best_peer else name
                    hits.append((float(field_at(m, "rel")), f"{where} {_interval(m)}"))
            lower = sum(rel < 0 for rel, _ in hits)
            parts.append(
                f"{words} {len(hits)} of {len(cells)} ({lower} lower, {len(hits) - lower} higher)"
                + "".join(f"{', ' if i else ': '}{text}" for i, (_, text) in enumerate(hits))
            )
        return "; ".join(parts)

    out = [
        Fig(
            "cells (workload / tier setup), runs",
            f"{len(cells)} ({sum(map(has_tier, cells))} with a tier below HBM), {runs} runs",
        )
    ]
    out += [
        Fig(
            f"{ours} vs each cell's best peer (the one {TODAY_FORM} does worst against, TTFT "
            "p90): cells whose paired interval excludes 0",
            significant(ours, best_peer=True),
        )
        for ours in (TODAY_FORM, *forms)
    ]
    out += [
        Fig(
            f"{ours} vs {TODAY_FORM} ({today_is}): cells whose paired interval excludes 0",
            significant(ours, best_peer=False),
        )
        for ours in forms
    ]
    return out


# benchmarks/tiers_agentic_seeds.py's files: the tiers study's agentic-long cells (or held-out
# variants of them) over more seeds than `make report` runs. "rows": the study's table rows kept
# (the best HBM-only peer, each setup's best peer, predicted_ttft), each with "paired"
# comparisons ({rel, ci, pairs}); "best_vs_best": per cell and tier setup, the setup's best peer
# against the best HBM-only peer. Goal 1 is judged on the realistic host tier (issue 29: 128 GiB
# per GPU, 1 TiB of an 8-GPU node's 2 TB DRAM), goal 2 on every tiered setup the file holds.
# Read here by its summariser and by the ranked findings (analysis/headlines.py): one reading.

TIER_GOAL_SETUP = "host 128 GiB"
TIER_GOAL_GAIN = -0.40  # goal 1: TTFT p90 at least 40% below HBM-only, the whole interval
OURS_GOAL_LEAD = -0.15  # goal 2: at least 15% below the best peer somewhere, significantly


@dataclass(frozen=True)
class TierGain:
    """Goal 1 on one cell of a tiers_agentic_seeds file, with `TIER_GOAL_SETUP`."""

    cell: str
    tier_best: str  # the best router with the tier
    hbm_only_best: str  # the best router with HBM only
    best_vs_best: Mapping[str, Any]  # tier_best with the tier vs hbm_only_best without
    same_router: Mapping[str, Any] | None  # hbm_only_best with vs without the tier


@dataclass(frozen=True)
class OursVsPeer:
    """predicted_ttft against the best peer in one tiered setup of a tiers_agentic_seeds file."""

    where: str  # "<cell>, <tier setup> vs <peer>"
    ttft: Mapping[str, Any]
    e2e: Mapping[str, Any]

    def worse(self) -> list[tuple[str, Mapping[str, Any]]]:
        """The metrics on which ours is significantly worse (interval above 0)."""
        return [
            (name, m)
            for name, m in (("TTFT", self.ttft), ("E2E", self.e2e))
            if excludes_zero(m) and float(field_at(m, "rel")) > 0
        ]


def tier_gains(doc: Mapping[str, Any]) -> list[TierGain]:
    """Goal 1's two readings per cell of a tiers_agentic_seeds file (`TIER_GOAL_SETUP` only)."""
    out = []
    for b in field_at(doc, "best_vs_best"):
        if field_at(b, "tier") != TIER_GOAL_SETUP:
            continue
        cell, base = field_at(b, "cell"), field_at(b, "hbm_only_best")
        same = [
            field_at(r, "paired", "vs_hbm_only")
            for r in field_at(doc, "rows")
            if r.get("cell") == cell
            and r.get("tiers") == TIER_GOAL_SETUP
            and str(r.get("router", "")).split()[0] == base
        ]
        out.append(
            TierGain(
                cell,
                field_at(b, "tier_best"),
                base,
                field_at(b, "paired"),
                same[0] if same else None,
            )
        )
    return out


def ours_vs_pricing_peers(doc: Mapping[str, Any]) -> list[OursVsPeer]:
    """predicted_ttft against each tiered setup's better tier-pricing peer (goal 2's narrower
    reading, `studies.tiers.PRICING_PEERS`), where the file has it (files written before
    2026-11-30 do not)."""
    out = []
    for r in field_at(doc, "rows"):
        got = field_at(r, "paired")
        p, e = got.get("vs_pricing_peer"), got.get("vs_pricing_peer_e2e")
        if p is None or e is None or field_at(r, "tiers") == HBM_ONLY:
            continue
        where = f"{field_at(r, 'cell')}, {field_at(r, 'tiers')} vs {got.get('pricing_peer')}"
        out.append(OursVsPeer(where, p, e))
    return out


def ours_vs_peers(doc: Mapping[str, Any]) -> list[OursVsPeer]:
    """predicted_ttft against each tiered setup's best peer in a tiers_agentic_seeds file (goal
    2 is about tiers, so the HBM-only setups are left out)."""
    out = []
    for r in field_at(doc, "rows"):
        p, e = (
            field_at(r, "paired").get("vs_best_peer"),
            field_at(r, "paired").get("vs_best_peer_e2e"),
        )
        if p is None or e is None or field_at(r, "tiers") == HBM_ONLY:
            continue
        best = [  # the setup's best peer, named by its own row
            str(x["router"]).split()[0]
            for x in field_at(doc, "rows")
            if x.get("cell") == r["cell"]
            and x.get("tiers") == r["tiers"]
            and "(best peer)" in str(x.get("router"))
        ]
        peer = best[0] if best else "the best peer"
        out.append(OursVsPeer(f"{field_at(r, 'cell')}, {field_at(r, 'tiers')} vs {peer}", p, e))
    return out


def _gain_verdict(m: Mapping[str, Any]) -> str:
    return MET if float(field_at(m, "ci")[1]) <= TIER_GOAL_GAIN else NOT_MET


@summariser(
    "tiers_agentic_seeds",
    "KV tiers on the long-context agentic workload over many seeds (sim, goals 1 and 2)",
)
def _tiers_agentic_seeds(doc: dict[str, Any]) -> list[Fig]:
    """Goal 1 in both readings on the realistic host tier (the fleet with the tier and its best
    router against the HBM-only fleet with its best; the best HBM-only router with and without
    the tier), and goal 2 over the file's tiered setups: where predicted_ttft is significantly
    worse than the setup's best peer (TTFT or E2E p90), and where it is >= 15% lower."""
    seeds = field_at(doc, "seeds")
    runs = sum(int(field_at(b, "runs")) for b in field_at(doc, "batches").values())
    out = [Fig("seeds, runs", f"{len(seeds)} ({min(seeds)}-{max(seeds)}), {runs} runs")]
    goal = f"<= {pct(TIER_GOAL_GAIN, sign=True)} (whole interval)"
    for g in tier_gains(doc):
        out.append(
            Fig(
                f"{g.cell}: {TIER_GOAL_SETUP} with its best router ({g.tier_best}) vs HBM "
                f"only with its best ({g.hbm_only_best}), TTFT p90",
                _interval(g.best_vs_best),
                goal,
                _gain_verdict(g.best_vs_best),
            )
        )
        if g.same_router is not None:
            out.append(
                Fig(
                    f"{g.cell}: the same router ({g.hbm_only_best}) with and without "
                    f"{TIER_GOAL_SETUP}, TTFT p90",
                    _interval(g.same_router),
                    goal,
                    _gain_verdict(g.same_router),
                )
            )
    ours = ours_vs_peers(doc)
    worse = [f"{o.where}, {name} p90 {_interval(m)}" for o in ours for name, m in o.worse()]
    leads = [
        f"{o.where} {_interval(o.ttft)}"
        for o in ours
        if excludes_zero(o.ttft) and float(field_at(o.ttft, "rel")) <= OURS_GOAL_LEAD
    ]
    out.append(
        Fig(
            f"predicted_ttft vs each tiered setup's best peer ({len(ours)} setups): "
            "significantly worse (TTFT or E2E p90)",
            "; ".join(worse) or "none",
            "none",
            MET if not worse else NOT_MET,
        )
    )
    out.append(
        Fig(
            f"predicted_ttft at least {pct(-OURS_GOAL_LEAD)} below the best peer's TTFT p90 "
            "(significantly)",
            "; ".join(leads) or "none",
        )
    )
    pricing = ours_vs_pricing_peers(doc)
    if pricing:
        worse = [f"{o.where}, {name} p90 {_interval(m)}" for o in pricing for name, m in o.worse()]
        out.append(
            Fig(
                f"predicted_ttft vs each tiered setup's better tier-pricing peer ({len(pricing)} "
                "setups; goal 2's narrower reading): significantly worse (TTFT or E2E p90)",
                "; ".join(worse) or "none",
                "none",
                MET if not worse else NOT_MET,
            )
        )
    return out


def _ff_where(c: Mapping[str, Any]) -> str:
    host = float(field_at(c, "host_gib"))
    tier = f"host {host:g} GiB" if host else "HBM only"
    return f"{field_at(c, 'policy')}, {field_at(c, 'workload')}, {tier}, {field_at(c, 'baseline')}"


def _at_least(k: int, n: int, p: float) -> float:
    """P(at least k of n independent events of probability p): how often k of n 95%
    intervals would lie below 0 (p = 0.025) with no effect at all."""
    return 1.0 - sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k))


@summariser("finish_first", "finished sessions' KV reused first (sim, pre-registered)")
@summariser(
    "finish_first_confirm",
    "finished sessions' KV reused first, confirmatory check on the traces (sim, pre-registered)",
)
def _finish_first(doc: dict[str, Any]) -> list[Fig]:
    """The pre-registered rule (docs/kv_tiers/pause_aware.md, "Finished sessions first"): it
    helps if its TTFT p90 is significantly below the same placement without it somewhere, and
    its TTFT and E2E p90 significantly above it nowhere."""
    return _helps_rule(doc, "the same placement without it")


@summariser(
    "finish_first_told",
    "the router's estimate told of finished-first and pause-aware releases (sim, pre-registered)",
)
@summariser(
    "finish_first_told_confirm",
    "the router's estimate told of finished-first releases, on the traces (sim, pre-registered)",
)
def _told(doc: dict[str, Any]) -> list[Fig]:
    """The same rule for telling the router's estimate of the releases against not telling
    it (docs/kv_tiers/pause_aware.md, "The router told of the releases"), and the estimate's
    error both ways."""
    out = _helps_rule(doc, "the router not told")
    err: dict[str, list[float]] = {}
    for r in field_at(doc, "runs"):
        if r.get("estimate_error_share") is not None:
            err.setdefault(str(r["placement"]), []).append(float(r["estimate_error_share"]))
    shown = [
        f"{p}: {pct(sum(err[p]) / len(err[p]))} told, "
        f"{pct(sum(err[p + '_untold']) / len(err[p + '_untold']))} not"
        for p in ("finish_first", "pause")
        if err.get(p) and err.get(p + "_untold")
    ]
    out.append(
        Fig(
            "the estimate's error, |predicted - engine HBM hit| over prompt tokens (mean of runs)",
            "; ".join(shown) or "none",
        )
    )
    return out


def _helps_rule(doc: dict[str, Any], against: str) -> list[Fig]:
    """Significantly lower TTFT p90 somewhere, TTFT and E2E p90 significantly higher nowhere,
    over the benchmark's paired comparisons (candidate against `against`)."""
    comps = field_at(doc, "comparisons")
    by = {m: [c for c in comps if c["metric"] == m] for m in ("ttft_p90", "e2e_p90", "hit_rate")}
    n = len(by["ttft_p90"])
    lower = [c for c in by["ttft_p90"] if below_zero(c)]
    higher = [c for m in ("ttft_p90", "e2e_p90") for c in by[m] if above_zero(c)]
    hit_up = [c for c in by["hit_rate"] if above_zero(c)]
    best = min(by["ttft_p90"], key=lambda c: float(c["rel_diff"]), default=None)
    where = "; ".join(f"{_ff_where(c)}: {paired_cell(c)}" for c in lower) or "none"
    worse = "; ".join(f"{_ff_where(c)} {c['metric']}: {paired_cell(c)}" for c in higher)
    return [
        Fig(
            f"TTFT p90 against {against}: significantly lower in",
            f"{len(lower)} of {n} (router, cell, placement) pairs ({where})",
            "at least 1",
            verdict_of(bool(lower)),
        ),
        Fig(
            "TTFT or E2E p90 significantly higher in",
            f"{len(higher)} of {2 * n}" + (f" ({worse})" if worse else ""),
            "none",
            verdict_of(not higher),
        ),
        Fig(
            "chance of as many lower by chance alone (no effect anywhere, pairs independent)",
            pct(_at_least(len(lower), n, 0.025)),
        ),
        Fig(
            "HBM hit rate significantly higher in",
            f"{len(hit_up)} of {len(by['hit_rate'])}",
        ),
        Fig(
            "largest TTFT p90 change (point estimate, with its interval)",
            f"{paired_cell(best)} ({_ff_where(best)})" if best else "none",
        ),
    ]


@summariser(
    "finish_first_real",
    "finished sessions' KV reused first on real vLLM engines, beside the simulator "
    "(pre-registered)",
)
@summariser(
    "finish_first_real_seeds",
    "finished sessions' KV reused first on real vLLM engines, confirmatory run on ten more "
    "seeds (pre-registered)",
)
@summariser(
    "finish_first_real_replicates",
    "finished sessions' KV reused first on real vLLM engines, the confirmatory seeds three "
    "times over, paired on seed and replicate (pre-registered)",
)
def _finish_first_real(doc: dict[str, Any]) -> list[Fig]:
    """The two rules of docs/kv_tiers/pause_aware.md, "On real vLLM engines": the real hit-rate
    change has the simulated one's sign for every router; and on the real engines TTFT p90
    significantly lower somewhere, TTFT and E2E p90 significantly higher nowhere."""
    comps = field_at(doc, "comparisons")
    policies = sorted({str(c["policy"]) for c in comps})
    shown, same = [], []
    for p in policies:
        sim, real = pick(comps, "sim", p, "hit_rate"), pick(comps, "vllm", p, "hit_rate")
        if sim is None or real is None:
            continue
        same.append((float(sim["rel_diff"]) > 0) == (float(real["rel_diff"]) > 0))
        shown.append(f"{p}: simulated {paired_cell(sim)}, real {paired_cell(real)}")
    real = [c for c in comps if c["backend"] == "vllm"]
    ttft = [c for c in real if c["metric"] == "ttft_p90"]
    lower = [c for c in ttft if below_zero(c)]
    higher = [c for c in real if c["metric"] in ("ttft_p90", "e2e_p90") and above_zero(c)]
    base, cand = variant_names(doc, ("lru", "finish_first"))
    spread = replicate_spread(field_at(doc, "runs"), base, cand, "finished-first / LRU")
    return [
        *spread,
        *(
            []
            if spread or not ttft
            else [
                Fig(
                    "real runs per seed and variant",
                    "1: the intervals carry no rerun-to-rerun spread of a pair "
                    "(finish_first_real_replicates repeats the pairs)",
                )
            ]
        ),
        Fig(
            "HBM hit rate, finished-first vs LRU, per router: the real change has the "
            "simulated one's sign",
            "; ".join(shown) or "none measured",
            "same sign for every router",
            verdict_of(all(same) if same else None),
        ),
        Fig(
            "real engines: TTFT p90 significantly lower in",
            f"{len(lower)} of {len(ttft)} routers"
            + "".join(f"; {c['policy']} {paired_cell(c)}" for c in ttft),
            "at least 1",
            verdict_of(bool(lower) if ttft else None),
        ),
        Fig(
            "real engines: TTFT or E2E p90 significantly higher in",
            f"{len(higher)} of {2 * len(ttft)}" + listed(higher),
            "none",
            verdict_of(not higher if ttft else None),
        ),
        real_load(doc),
    ]


# benchmarks/tiers_lazy_store_bound.py: per cell ("<workload>/host_<GiB>"), the study's three
# readings under each end of when the lazy tier stores (`models`: "walk", the study's, and
# "free", every turn stored when it ends), each {metric: {rel, ci, pairs}}.
LAZY_READINGS = {
    "tier_gain": "the tier's gain",
    "ours_vs_best_peer": "ours vs best peer",
    "ours_vs_pricing_peer": "ours vs better pricing peer",
}


def ttft_reading(m: Mapping[str, Any]) -> str:
    """A comparison's TTFT p90 as the pre-registered rule reads it: lower, higher or n.s."""
    c = field_at(m, "ttft_p90")
    if not excludes_zero(c):
        return "n.s."
    return "lower" if float(field_at(c, "rel")) < 0 else "higher"


def _ends(walk: Mapping[str, Any], free: Mapping[str, Any], key: str) -> str:
    """One reading's TTFT p90 under both ends, "<walk> -> <free>", each with "n.s." if so."""
    return " -> ".join(
        _interval(field_at(x, key, "ttft_p90"))
        + ("" if excludes_zero(field_at(x, key, "ttft_p90")) else " n.s.")
        for x in (walk, free)
    )


@summariser(
    "tiers_lazy_store_bound_router_told",
    "the same with the router's estimate storing when the engine does (sim, exploratory)",
)
@summariser(
    "tiers_lazy_store_bound",
    "the tiers study's readings when the lazy tier stores at eviction or when blocks are freed "
    "(sim, pre-registered)",
)
def _tiers_lazy_store_bound(doc: dict[str, Any]) -> list[Fig]:
    """Per cell the tier's gain and ours against the best peer under both ends (TTFT p90), and
    which of the study's readings change between them (docs/kv_tiers/study_followups.md, "If
    the lazy tier stored when blocks are freed")."""
    changed, rows, n = [], [], 0
    for name, cell in field_at(doc, "cells").items():
        walk, free = (field_at(cell, "models", m) for m in ("walk", "free"))
        for key, words in LAZY_READINGS.items():
            n += 1
            a, b = ttft_reading(field_at(walk, key)), ttft_reading(field_at(free, key))
            if a != b:
                changed.append(f"{name} {words}: {a} -> {b}")
        gain, ours = (_ends(walk, free, k) for k in ("tier_gain", "ours_vs_best_peer"))
        rows.append(
            Fig(
                f"{name}: tier's gain ({field_at(cell, 'best_hbm_only_peer')}); ours vs best "
                f"peer ({field_at(walk, 'best_peer')} -> {field_at(free, 'best_peer')}), "
                "TTFT p90, stored at eviction -> when freed",
                f"{gain}; {ours}",
            )
        )
    head = Fig(
        "the study's readings (tier's gain, ours vs best peer, ours vs better pricing peer; "
        "TTFT p90 lower / higher / n.s.) that differ between the two ends",
        f"{len(changed)} of {n}" + (f": {'; '.join(changed)}" if changed else ""),
    )
    return [head, *rows]
