"""Summaries of what the engines' prefix caches keep against what routers believe of them
(issue 29; docs/kv_tiers/study_followups.md): the estimated view against the exact one
(`estimate_view_gap`), whether the requests that lose their prefix while queued were routed
wrongly (`queued_prefix_loss`), and an engine that refreshes a waiting request's prefix
(`refresh_on_arrival`)."""

from __future__ import annotations

from typing import Any

from agentic_kvc.analysis.bench_summary.core import (
    Fig,
    above_zero,
    below_zero,
    field_at,
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


@summariser(
    "estimate_view_gap",
    "the estimated cache view against the exact one (KV events) on the tiers study's traces",
)
def _estimate_view_gap(doc: dict[str, Any]) -> list[Fig]:
    """Per cell: what the exact view changes for predicted_ttft (TTFT p90, and whether any
    decision moved), the gap to sticky_least_loaded with each view, and how far each view's
    expected HBM hit is from the engine's (docs/kv_tiers/study_followups.md, "The estimated
    view's errors")."""
    comps = field_at(doc, "comparisons")
    runs = field_at(doc, "runs")
    cells = sorted({(str(c["workload"]), float(c["host_gib"])) for c in comps})

    def comp(cell: tuple[str, float], base: str, cand: str) -> dict[str, Any] | None:
        return next(
            (
                c
                for c in comps
                if (c["workload"], float(c["host_gib"])) == cell
                and (c["baseline"], c["candidate"], c["metric"]) == (base, cand, "ttft_p90")
            ),
            None,
        )

    def error(cell: tuple[str, float], variant: str) -> str:
        rs = [
            r
            for r in runs
            if (r["workload"], float(r["host_gib"]), r["variant"]) == (*cell, variant)
            and r.get("over_share") is not None
        ]
        if not rs:
            return "-"
        over = sum(float(r["over_share"]) for r in rs) / len(rs)
        under = sum(float(r["under_share"]) for r in rs) / len(rs)
        return f"{pct(over)} over / {pct(under)} under"

    figs = []
    for cell in cells:
        where = f"{cell[0]}, host {cell[1]:g} GiB"
        exact = comp(cell, "predicted_ttft", "predicted_ttft_exact")
        est_gap = comp(cell, "sticky_least_loaded", "predicted_ttft")
        exact_gap = comp(cell, "sticky_least_loaded", "predicted_ttft_exact")
        if exact is None or est_gap is None or exact_gap is None:
            continue
        same = int(exact.get("n_differ", -1)) == 0
        figs.append(
            Fig(
                f"{where}: predicted_ttft TTFT p90, exact view vs estimated",
                "every request placed as with the estimate, TTFT identical"
                if same
                else paired_cell(exact),
            )
        )
        figs.append(
            Fig(
                f"{where}: predicted_ttft vs sticky_least_loaded, TTFT p90, estimated / exact",
                f"{paired_cell(est_gap)} / {paired_cell(exact_gap)}",
            )
        )
        figs.append(
            Fig(
                f"{where}: expected HBM hit minus the engine's, share of prompt tokens "
                "(predicted_ttft), estimated; exact",
                f"{error(cell, 'predicted_ttft')}; {error(cell, 'predicted_ttft_exact')}",
            )
        )
    return figs


# The pre-registered readings of benchmarks/queued_prefix_loss.py (its `verdict`).
QUEUED_LOSS_READINGS = {
    "a": "(a) wrong where the prefix is lost: another instance was better; a survival term is next",
    "b": "(b) costlier, but the chosen instance was mostly still best: the engine's loss, "
    "not the router's",
    "c": "(c) not costlier: the lead is closed",
}


@summariser(
    "queued_prefix_loss",
    "prefixes lost while queued: predicted_ttft's regret where a request loses its cached "
    "prefix before admission (sim, pre-registered)",
)
def _queued_prefix_loss(doc: dict[str, Any]) -> list[Fig]:
    """Per cell: how often a request loses HBM prefix blocks while queued, the fleet-TTFT regret
    of those decisions minus the others' (mean over seeds, bootstrap interval), how often the
    best alternative was another instance, and the pre-registered reading."""
    figs = []
    for c in field_at(doc, "cells"):
        where = f"{c['workload']}, host {float(c['host_gib']):g} GiB"
        d = field_at(c, "diff_regret_fleet_ttft_s")
        own = field_at(c, "diff_regret_ttft_s")
        share = c.get("lost_best_elsewhere_share")
        figs.append(
            Fig(
                f"{where}: decisions whose request lost prefix blocks while queued "
                "(their mean lost share of all prompt tokens)",
                f"{pct(float(c['lost_share']))} ({pct(float(c['lost_token_share_mean']))})",
            )
        )
        figs.append(
            Fig(
                f"{where}: their regret minus the other decisions', fleet mean TTFT / the "
                "request's own TTFT (ms, mean over seeds)",
                f"{1e3 * d['mean']:+.1f} [{1e3 * d['ci_low']:+.1f}, {1e3 * d['ci_high']:+.1f}] / "
                f"{1e3 * own['mean']:+.1f} [{1e3 * own['ci_low']:+.1f}, "
                f"{1e3 * own['ci_high']:+.1f}]",
            )
        )
        figs.append(
            Fig(
                f"{where}: of them, best alternative on another instance (their share of all "
                "fleet-TTFT regret); reading",
                f"{'-' if share is None else pct(float(share))} "
                f"({pct(float(c['recoverable_regret_share_mean'] or 0.0))}); "
                f"{QUEUED_LOSS_READINGS.get(str(c['verdict']), str(c['verdict']))}",
            )
        )
    return figs


@summariser(
    "refresh_on_arrival",
    "a waiting request's cached prefix made most recent when it arrives (sim.refresh_on_arrival, "
    "pre-registered)",
)
def _refresh_on_arrival(doc: dict[str, Any]) -> list[Fig]:
    """The pre-registered rule recomputed from the paired rows (TTFT p90 significantly lower
    somewhere, TTFT and E2E p90 significantly higher nowhere), the HBM hit rate's changes, and
    the largest TTFT p90 changes either way."""
    comps = field_at(doc, "comparisons")

    def where(c: dict[str, Any]) -> str:
        return f"{c['workload']}, host {float(c['host_gib']):g} GiB, {c['policy']}"

    ttft = [c for c in comps if c["metric"] == "ttft_p90"]
    lower = [c for c in ttft if below_zero(c)]
    higher = [c for c in comps if c["metric"] in ("ttft_p90", "e2e_p90") and above_zero(c)]
    hits = [c for c in comps if c["metric"] == "hit_rate"]
    hit_up = sum(above_zero(c) for c in hits)
    hit_down = sum(below_zero(c) for c in hits)
    figs = [
        Fig(
            "TTFT p90 significantly lower (cell, host, router)",
            f"{len(lower)} of {len(ttft)}"
            + "".join(f"; {where(c)} {paired_cell(c)}" for c in lower[:4])
            + ("; ..." if len(lower) > 4 else ""),
        ),
        Fig(
            "TTFT or E2E p90 significantly higher",
            f"{len(higher)} of {2 * len(ttft)}"
            + "".join(f"; {where(c)} {c['metric']} {paired_cell(c)}" for c in higher[:4])
            + ("; ..." if len(higher) > 4 else ""),
        ),
        Fig(
            "the pre-registered rule: helps (TTFT p90 lower somewhere, TTFT and E2E p90 higher "
            "nowhere)",
            "yes" if lower and not higher else "no",
            "lower somewhere, higher nowhere",
            verdict_of(bool(lower) and not higher if ttft else None),
        ),
        Fig(
            "HBM hit rate significantly higher / lower",
            f"{hit_up} / {hit_down} of {len(hits)}",
        ),
    ]
    if ttft:
        best = min(ttft, key=lambda c: float(c["rel_diff"]))
        worst = max(ttft, key=lambda c: float(c["rel_diff"]))
        figs.append(
            Fig(
                "largest TTFT p90 change down / up",
                f"{where(best)} {paired_cell(best)} / {where(worst)} {paired_cell(worst)}",
            )
        )
    return figs


@summariser(
    "refresh_on_arrival_real_seeds",
    "a waiting request's prefix refreshed on arrival on real vLLM engines, predicted_ttft on "
    "six more seeds (pre-registered)",
)
@summariser(
    "refresh_on_arrival_real",
    "a waiting request's prefix refreshed on arrival on real vLLM engines, beside the "
    "simulator (pre-registered)",
)
def _refresh_on_arrival_real(doc: dict[str, Any]) -> list[Fig]:
    """The rules of docs/kv_tiers/study_followups.md, "Refreshing a waiting request's prefix on
    real engines": valid if the refresh runs' engines, and only theirs, announce the plugin;
    no harm if no router's TTFT or E2E p90 is significantly higher and the refresh runs have no
    request errors; the simulator's prediction (no change) holds if no real TTFT p90, E2E p90
    or hit-rate change is significant."""
    comps = field_at(doc, "comparisons")
    runs = [r for r in field_at(doc, "runs") if r.get("backend") == "vllm"]
    base, cand = variant_names(doc, ("plain", "refresh"))
    real = [c for c in comps if c["backend"] == "vllm"]
    metrics = ("ttft_p90", "e2e_p90", "hit_rate")
    figs = replicate_spread(field_at(doc, "runs"), base, cand, "refreshed / plain")
    on = [int(r.get("engines_with_plugin", -1)) for r in runs if r["variant"] == cand]
    off = [int(r.get("engines_with_plugin", -1)) for r in runs if r["variant"] == base]
    valid = bool(on) and min(on) >= 1 and len(set(on)) == 1 and off and max(off) == 0
    figs.append(
        Fig(
            "engines announcing the plugin: refresh runs / plain runs (min-max)",
            f"{min(on)}-{max(on)} / {min(off)}-{max(off)}" if on and off else "not measured",
            "all of a refresh run's, none of a plain run's",
            verdict_of(valid if on and off else None),
        )
    )
    for policy in sorted({str(c["policy"]) for c in real}):
        cells = []
        for m in metrics:
            r, s = pick(comps, "vllm", policy, m), pick(comps, "sim", policy, m)
            if r is not None:
                sim = f" (simulated {paired_cell(s)})" if s is not None else ""
                cells.append(f"{m} {paired_cell(r)}{sim}")
        figs.append(Fig(f"{policy}, real, refresh vs plain", "; ".join(cells)))
    higher = [c for c in real if c["metric"] in ("ttft_p90", "e2e_p90") and above_zero(c)]
    errors = sum(int(r.get("errors", 0)) for r in runs if r["variant"] == cand)
    judged = [c for c in real if c["metric"] in metrics]
    moved = [c for c in judged if above_zero(c) or below_zero(c)]
    measured = bool(real)
    figs += [
        Fig(
            "does no harm: TTFT or E2E p90 significantly higher / request errors with it on",
            f"{len(higher)} of {sum(c['metric'] in ('ttft_p90', 'e2e_p90') for c in real)}"
            + listed(higher)
            + f" / {errors}",
            "none / 0",
            verdict_of(not higher and errors == 0 if measured else None),
        ),
        Fig(
            "the simulator's prediction (no change) holds: real changes significant",
            f"{len(moved)} of {len(judged)}" + listed(moved),
            "none",
            verdict_of(not moved if measured else None),
        ),
        real_load(doc),
    ]
    return figs
