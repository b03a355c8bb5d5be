"""Study: KV tiers below HBM, crossed with routing (simulator; issue 29).

A coding agent's session returns after every tool call with a longer prompt whose prefix it
has already computed. When the fleet's HBM cannot hold every paused session, that prefix is
evicted and recomputed, unless a tier below HBM kept it: host memory (per instance) or a
node's disk store. A reload is not free (bytes over the host link, in the link's queue), so
where a request should go depends on what each instance holds in each tier. This study runs
HBM only, + host (two capacities) and + host + disk on three workloads at two loads, with a
tier-blind peer, the peers' tier-aware scorers (fixed credits per tier), an agent router's
session stickiness, and predicted_ttft, which prices each tier's reload by time. Unlimited
HBM beside each workload and load is the ceiling.

Runs are grouped into cells (one workload at one load: the experiment's `variant`); a run's
tier setup is read from its experiment (`_ceiling`: unlimited HBM, `_disk`: host + disk) and
its `host_gib` label.

The experiments `tiers_real_*` ask the same question on real vLLM CPU engines (issue 30);
`tiers_real` analyses them, and its tables follow the simulated ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import polars as pl
from matplotlib.axes import Axes

from agentic_kvc.analysis.studies import tiers_real
from agentic_kvc.analysis.studies.base import (
    Section,
    StudyData,
    compare,
    diff_cell,
    finding_text,
    ms,
    pct,
    sec,
)
from agentic_kvc.analysis.studies.common import ordered, study
from agentic_kvc.analysis.studies.figures import panel_grid, save
from agentic_kvc.paired import PairedResult

NAME = "tiers"
TITLE = "KV tiers below HBM, crossed with routing (simulator)"
QUESTION = (
    "When a fleet's HBM cannot hold every paused agent session, how much TTFT does a host (and "
    "disk) tier win back, does the router need to know which tier holds a session, and does "
    "pricing a reload by its time beat the peers' fixed per-tier credits?"
)
OURS = "predicted_ttft"
TIER_BLIND = "sglang_cache_aware"
ROUTERS = (TIER_BLIND, "llmd_precise", "dynamo_kv", "sticky_least_loaded", OURS)
# The peers whose routers price the tiers (fixed credits per medium): goal 2's narrower
# reading of "the best peer's tier-aware routing", reported beside the best of all peers.
PRICING_PEERS = ("llmd_precise", "dynamo_kv")
HBM_ONLY = "HBM only"
CEILING = "unlimited HBM"
DISK_SETUP = "host 16 GiB + disk"
# The goals (docs/kv_tiers.md): a realistic host tier cuts the best peer's TTFT p90 on
# the long-context agentic workload by >= 40%; ours >= 15% below the best tier-aware peer on at
# least one workload, never significantly worse on any, E2E p90 not worse.
GOAL_TIER_GAIN = -0.40
GOAL_OURS = -0.15
# The finding line naming the setup ours does worst in (read by analysis/headlines.py).
WORST_SETUP = f"with tiers, {OURS}'s worst setup against the best peer"


def tier_of(experiment: str, host_gib: Any) -> str:
    """A run's tier setup from its experiment and `host_gib` label."""
    if experiment.endswith("_ceiling"):
        return CEILING
    if experiment.endswith("_disk"):
        return DISK_SETUP
    gib = float(host_gib) if host_gib is not None else 0.0
    return HBM_ONLY if gib == 0 else f"host {gib:g} GiB"


def _tier_order(tiers: list[str]) -> list[str]:
    hosts = sorted(
        (t for t in tiers if t.startswith("host") and "disk" not in t),
        key=lambda t: float(t.split()[1]),
    )
    rest = [t for t in tiers if t.endswith("disk")] + [t for t in tiers if t == CEILING]
    return [t for t in (HBM_ONLY,) if t in tiers] + hosts + rest


def _labelled(df: pl.DataFrame) -> pl.DataFrame:
    host = df["host_gib"] if "host_gib" in df.columns else pl.Series([None] * df.height)
    tiers = [tier_of(e, h) for e, h in zip(df["experiment"], host, strict=True)]
    return df.with_columns(pl.Series("tier", tiers), pl.col("variant").alias("cell"))


def _token_shares(df: pl.DataFrame) -> dict[str, float]:
    total = df["input_tokens"].sum() or 1
    shares = {"hbm": df["cached_tokens"].fill_null(0).sum() / total}
    for tier in ("host", "disk"):
        col = f"{tier}_tokens"
        shares[tier] = df[col].fill_null(0).sum() / total if col in df.columns else 0.0
    shares["recomputed"] = max(1.0 - shares["hbm"] - shares["host"] - shares["disk"], 0.0)
    return shares


def pooled_summary(df: pl.DataFrame) -> dict[str, Any]:
    """Pooled over the cell's seeds: latency quantiles, token shares by tier, reload wait."""
    ok = df.filter(pl.col("error").is_null())
    wait = ok["reload_wait_s"].fill_null(0.0) if "reload_wait_s" in ok.columns else None
    return {
        "ttft_p50": ok["ttft_s"].quantile(0.5),
        "ttft_p90": ok["ttft_s"].quantile(0.9),
        "e2e_p90": ok["e2e_s"].quantile(0.9),
        "wait_mean": float(wait.mean()) if wait is not None and len(wait) else 0.0,
        "errors": df.height - ok.height,
        **_token_shares(ok),
    }


def best_peer_of(rows: dict[str, dict[str, Any]], among: tuple[str, ...]) -> str | None:
    """The study's best peer: of the routers in `among` that `rows` (pooled summaries) has,
    the one with the lowest pooled TTFT p90 over error-free requests."""
    present = [r for r in among if r in rows]
    return min(present, key=lambda r: rows[r]["ttft_p90"]) if present else None


# The per-cell table's columns: (key, header). `Row.cells` keys a row's cells by the first
# (unique: the two "vs best peer" columns are TTFT p90 and E2E p90), the table prints the second.
COLUMNS = (
    ("tiers", "tiers"),
    ("router", "router"),
    ("TTFT p50 (ms)", "TTFT p50 (ms)"),
    ("TTFT p90 (ms)", "TTFT p90 (ms)"),
    ("vs HBM only", "vs HBM only"),
    ("vs best peer", "vs best peer"),
    ("E2E p90 (s)", "E2E p90 (s)"),
    ("vs best peer e2e", "vs best peer"),
    ("tokens HBM / host / disk / recomputed", "tokens HBM / host / disk / recomputed"),
    ("reload wait (ms)", "reload wait (ms)"),
)


@dataclass(frozen=True)
class Row:
    """One router in one tier setup of a cell, pooled over the cell's replicates: what a row
    of the study's per-cell table shows, as numbers (for scripts that read the study's results:
    benchmarks/tiers_agentic_seeds.py), and the comparisons the answer is built from."""

    cell: str
    tier: str
    router: str
    summary: dict[str, Any]  # `pooled_summary`: TTFT/E2E quantiles, token shares, reload wait
    best_peer: str | None  # the peer with the lowest TTFT p90 in this setup (None: ceiling)
    best_hbm_only_peer: str | None  # the cell's best peer with HBM only
    vs_hbm: PairedResult | None  # this router with this setup against it with HBM only
    vs_peer: PairedResult | None  # ours against the setup's best peer, TTFT p90
    vs_peer_e2e: PairedResult | None  # the same, E2E p90
    # Ours against the best of the peers that price tiers (PRICING_PEERS), TTFT / E2E p90.
    pricing_peer: str | None = None
    vs_pricing: PairedResult | None = None
    vs_pricing_e2e: PairedResult | None = None

    def cells(self) -> dict[str, str]:
        """The table row's cells, keyed by `COLUMNS`' keys."""
        x = self.summary
        label = (
            self.router
            + (" (best peer)" if self.router == self.best_peer else "")
            + (f" ({x['errors']} failed requests)" if x["errors"] else "")
        )
        values = [
            self.tier,
            label,
            ms(x["ttft_p50"]),
            ms(x["ttft_p90"]),
            diff_cell(self.vs_hbm),
            diff_cell(self.vs_peer),
            sec(x["e2e_p90"]),
            diff_cell(self.vs_peer_e2e),
            f"{pct(x['hbm'])} / {pct(x['host'])} / {pct(x['disk'])} / {pct(x['recomputed'])}",
            ms(x["wait_mean"]),
        ]
        return dict(zip((key for key, _ in COLUMNS), values, strict=True))


def simulated(df: pl.DataFrame) -> pl.DataFrame:
    """The study's simulated runs (not `tiers_real_*`), labelled with their cell and tier."""
    return _labelled(df.filter(~pl.col("experiment").str.starts_with(tiers_real.PREFIX)))


def cell_rows(df: pl.DataFrame) -> list[Row]:
    """The per-cell tables' rows of `simulated(...)` runs: cells sorted, tier setups in
    `_tier_order`, routers in `ROUTERS`' order. The best peer (tier-blind or tier-aware, not
    ours) is picked per setup by pooled TTFT p90 from the same runs it is compared on."""
    peers = tuple(r for r in ROUTERS if r != OURS)
    out: list[Row] = []
    for cell in sorted(set(df["cell"])):
        at = df.filter(pl.col("cell") == cell)
        tiers = _tier_order(sorted(set(at["tier"])))
        routers = ordered(sorted(set(at["policy"])), ROUTERS)
        summ = {
            (str(t), str(r)): pooled_summary(part)
            for (t, r), part in at.partition_by(["tier", "policy"], as_dict=True).items()
        }
        best_blind = best_peer_of(
            {r: summ[(HBM_ONLY, r)] for r in peers if (HBM_ONLY, r) in summ}, peers
        )
        for t in tiers:
            here = {r: summ[(t, r)] for r in routers if (t, r) in summ}
            best_peer = best_peer_of(here, peers) if t != CEILING else None
            pricing = best_peer_of(here, PRICING_PEERS) if t != CEILING else None
            at_t = at.filter(pl.col("tier") == t)
            for r in routers:
                if r not in here:
                    continue
                vs_peer = vs_peer_e2e = vs_pricing = vs_pricing_e2e = None
                if r == OURS and best_peer is not None:
                    vs_peer = compare(at_t, best_peer, OURS, "ttft_p90", by="policy")
                    vs_peer_e2e = compare(at_t, best_peer, OURS, "e2e_p90", by="policy")
                if r == OURS and pricing is not None:
                    vs_pricing, vs_pricing_e2e = (
                        (vs_peer, vs_peer_e2e)
                        if pricing == best_peer
                        else (
                            compare(at_t, pricing, OURS, "ttft_p90", by="policy"),
                            compare(at_t, pricing, OURS, "e2e_p90", by="policy"),
                        )
                    )
                vs_hbm = None
                if t not in (HBM_ONLY, CEILING) and (HBM_ONLY, r) in summ:
                    both = at.filter((pl.col("policy") == r) & pl.col("tier").is_in([HBM_ONLY, t]))
                    vs_hbm = compare(both, HBM_ONLY, t, "ttft_p90", by="tier")
                out.append(
                    Row(
                        cell,
                        t,
                        r,
                        here[r],
                        best_peer,
                        best_blind,
                        vs_hbm,
                        vs_peer,
                        vs_peer_e2e,
                        pricing if r == OURS else None,
                        vs_pricing,
                        vs_pricing_e2e,
                    )
                )
    return out


@study(NAME, TITLE, QUESTION)
def analyse(
    s: Section, df: pl.DataFrame, data: StudyData, figures: Path, root: Path | None
) -> Section:
    real_part = df.filter(pl.col("experiment").str.starts_with(tiers_real.PREFIX))
    df = simulated(df)
    rows = cell_rows(df)
    curves: dict[str, dict[str, dict[str, float]]] = {}
    for cell in dict.fromkeys(x.cell for x in rows):
        at = [x for x in rows if x.cell == cell]
        routers = ordered(sorted({x.router for x in at}), ROUTERS)
        curves[cell] = {
            r: {x.tier: x.summary["ttft_p90"] for x in at if x.router == r} for r in routers
        }
        s.table(
            f"**{cell}**: TTFT and where prompt tokens came from, per tier setup and router "
            "(pooled over its replicates: generator or session-jitter seeds, or the trace's "
            "600 s windows). *vs HBM only*: "
            "the same router without tiers; *vs best peer*: ours against the peer with the "
            "lowest TTFT p90 in that setup; both paired over replicates, 95% intervals. "
            "Tokens: the share of prompt tokens served from HBM / "
            "host / disk / recomputed. Reload wait: mean seconds a request waited for its "
            "tier loads (link queue and transfer).",
            [header for _, header in COLUMNS],
            [list(x.cells().values()) for x in at],
        )
    # The best HBM-only peer: + host vs HBM only; ours against each setup's best peer.
    gains = [
        (x.cell, x.tier, x.vs_hbm)
        for x in rows
        if x.router == x.best_hbm_only_peer and x.tier not in (HBM_ONLY, CEILING)
    ]
    ours = [
        (x.cell, x.tier, x.best_peer, x.vs_peer, x.vs_peer_e2e)
        for x in rows
        if x.router == OURS and x.best_peer is not None
    ]
    ours_vs_pricing = [
        (x.cell, x.tier, x.pricing_peer, x.vs_pricing, x.vs_pricing_e2e)
        for x in rows
        if x.router == OURS and x.pricing_peer is not None
    ]
    fig = capacity_figure(curves, figures / "ttft_p90_by_host_capacity.svg")
    if fig is not None:
        s.figure(
            fig,
            "TTFT p90 against host-tier capacity per router (0 = HBM only; dashed: unlimited "
            "HBM), one panel per workload and load.",
            root,
        )
    fig = tokens_over_time_figure(df, figures / "tokens_by_tier_over_time.png")
    if fig is not None:
        s.figure(
            fig,
            "Where prompt tokens came from over one run (agentic-long at the higher load, "
            f"{DISK_SETUP}, predicted_ttft, first seed): HBM, host, disk, recomputed, per minute.",
            root,
        )
    sim_answer = _answer(s, gains, ours, ours_vs_pricing)
    s.note(
        "Setup: config/config.yaml experiments `tiers_*` (docs/kv_tiers.md has the tier model, "
        "the links' numbers and their sources). Tier-blind: sglang_cache_aware scores the HBM "
        "hit only. Tier-aware peers: dynamo_kv credits a host block at 0.75 and a disk block at "
        "0.25 of an HBM block (Dynamo's defaults); llmd_precise weighs media gpu 1.0 / cpu 0.8 "
        "(llm-d's precise scorer). sticky_least_loaded keeps a session on its instance until "
        "its last turn. predicted_ttft adds each candidate's reload time (bytes over the link "
        "plus the reloads it has routed there and not seen finish) and recomputes only what no "
        "tier holds. The best peer is picked per setup from the same runs it is compared on, "
        "which favours the peer. The wider router set (llm-d's two-scorer recipe, session "
        "affinity with an idle TTL, llmd_weighted) runs with `snakemake --cores 1 "
        "results/notebooks/study_tiers.ipynb --configfile config/tiers_full.yaml`."
    )
    real_answer = tiers_real.analyse_real(s, real_part, data) if real_part.height else ""
    s.answer = _joined(sim_answer, real_answer, bool(gains or ours))
    return s


def _joined(sim_answer: str, real_answer: str, sim_decided: bool) -> str:
    """The simulated answer, then the real engines' bullet (alone when only it decides)."""
    if not real_answer:
        return sim_answer
    real = real_answer[0].upper() + real_answer[1:] + "."
    return f"{sim_answer}\n- **Real engines.** {real}" if sim_decided else real


Judged = list[tuple[str, str, str, PairedResult | None, PairedResult | None]]


def _against(judged: Judged, peer: str = "the best peer's") -> tuple[Judged, Judged, Judged, str]:
    """Of `judged` (ours against a peer per tiered setup): the setups where ours is at least
    GOAL_OURS below (significantly), significantly worse on TTFT p90, on E2E p90, and the
    sentence that names them."""
    wins = [x for x in judged if x[3].significant and x[3].rel_diff <= GOAL_OURS]  # type: ignore[union-attr]
    worse = [x for x in judged if x[3].significant and x[3].rel_diff > 0]  # type: ignore[union-attr]
    e2e_worse = [x for x in judged if x[4] is not None and x[4].significant and x[4].rel_diff > 0]
    text = (
        f"{OURS} is at least {-GOAL_OURS:.0%} below {peer} "
        f"TTFT p90 (significantly) in {len(wins)} of {len(judged)} setups"
        + (" (" + _setups(wins, with_peer=False) + ")" if wins else "")
        + f", significantly worse in {len(worse)}"
        + (" (" + _setups(worse, with_peer=True) + ")" if worse else "")
        + f", and significantly worse on E2E p90 in {len(e2e_worse)}"
        + (" (" + _setups(e2e_worse, with_peer=True, e2e=True) + ")" if e2e_worse else "")
        + _paired_over(x[3] for x in judged)
    )
    return wins, worse, e2e_worse, text


def _answer(
    s: Section,
    gains: list[tuple[str, str, PairedResult | None]],
    ours: Judged,
    ours_vs_pricing: Judged | None = None,
) -> str:
    """The answer: one sentence of counts (what a reader takes away), then a bullet per
    question with every setup's numbers (`_joined` adds the real engines' bullet)."""
    lead, bullets = [], []
    big = [(c, t, r) for c, t, r in gains if r is not None and t == "host 128 GiB"]
    for cell, t, r in big:
        assert r is not None
        s.findings.append(finding_text(r, f"{cell}: + {t} vs HBM only (best HBM-only peer)"))
    if big:
        down = sorted(r.rel_diff for *_, r in big if r.significant and r.rel_diff < 0)  # type: ignore[union-attr]
        lead.append(
            "a 128 GiB host tier significantly lowers the TTFT p90 of the peer that is best "
            f"with HBM only in {len(down)} of {len(big)} workloads and loads"
            + (f" ({down[-1]:+.0%} to {down[0]:+.0%})" if down else "")
        )
        bullets.append(
            "**Host tier.** A 128 GiB host tier changes the TTFT p90 of the peer that is best "
            "with HBM only by "
            + "; ".join(f"{diff_cell(r)} on {c}" for c, _, r in big)
            + f" (goal on the long-context agentic workload: {GOAL_TIER_GAIN:+.0%} or better)"
            + _paired_over(r for *_, r in big)
        )
    judged = [(c, t, p, r, e) for c, t, p, r, e in ours if r is not None and t != HBM_ONLY]
    for cell, t, peer, r, _ in judged:
        assert r is not None
        s.findings.append(finding_text(r, f"{cell}, {t}: {OURS} vs best peer {peer}, TTFT p90"))
    if judged:
        # The setup ours does worst in against its best peer, named in REPORT.md's ranked
        # findings beside the long-context workload's (analysis/headlines.py), so a loss
        # elsewhere is not left to the section's tables.
        worst = max(judged, key=lambda x: x[3].rel_diff)  # type: ignore[union-attr]
        same = [x for x in judged if x[0] == worst[0] and _outcome(x[3]) == _outcome(worst[3])]
        assert worst[3] is not None
        s.findings.append(
            finding_text(worst[3], f"{WORST_SETUP} ({_setups(same, with_peer=True)}), TTFT p90")
        )
        wins, worse, _e2e, text = _against(judged)
        lead.append(
            f"with tiers, {OURS} (reloads priced by time) is at least {-GOAL_OURS:.0%} below "
            f"the best peer in {len(wins)} of {len(judged)} setups and significantly worse in "
            f"{len(worse)}"
        )
        bullets.append(f"**Routing with tiers.** {text}")
    pricing = [
        (c, t, p, r, e)
        for c, t, p, r, e in ours_vs_pricing or []
        if r is not None and t != HBM_ONLY
    ]
    if pricing:
        text = _against(pricing, "the better one's")[3]
        bullets.append(
            f"**Against the peers that price tiers** ({', '.join(PRICING_PEERS)}: goal 2's "
            "narrower reading of the best peer's tier-aware routing; the bullet above also "
            f"counts the session-affinity baseline and the tier-blind peer). {text}"
        )
    if not lead:
        return "The tier runs are not complete here, so the data do not decide it."
    text = "; ".join(lead) + "."
    return text[0].upper() + text[1:] + "\n\n" + "\n".join(f"- {b}" for b in bullets)


def _paired_over(results: Iterable[PairedResult | None]) -> str:
    """ " (paired over N replicates, 95% intervals).": the replicates each comparison was
    paired over (a cell's seeds or windows), as counted."""
    n = sorted({r.n_pairs for r in results if r is not None})
    over = str(n[0]) if n[0] == n[-1] else f"{n[0]}-{n[-1]}"
    return f" (paired over {over} replicates, 95% intervals)."


def _outcome(r: PairedResult | None) -> tuple[float, ...]:
    """What makes two comparisons the same outcome: their values and interval (e.g. a host
    tier larger than the working set, where 16 and 128 GiB give the same runs)."""
    assert r is not None
    return (r.baseline_value, r.candidate_value, r.ci_low, r.ci_high)


def _setups(
    judged: list[tuple[str, str, str, PairedResult | None, PairedResult | None]],
    with_peer: bool,
    e2e: bool = False,
) -> str:
    """The setups named in the answer; a cell's setups whose comparison (TTFT p90, or E2E p90
    with `e2e`) came out identical (the same values and interval: e.g. a host tier larger than
    the working set, where 16 and 128 GiB give the same runs) are named once, joined by "/"."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for cell, tier, peer, ttft, e2e_result in judged:
        r = e2e_result if e2e else ttft
        assert r is not None
        key = (cell, peer, *_outcome(r))
        groups.setdefault(key, []).append(tier)
    out = []
    for (cell, peer, *_), tiers in groups.items():
        same = " (identical results)" if len(tiers) > 1 else ""
        out.append(f"{cell}, {' / '.join(tiers)}" + (f" vs {peer}" if with_peer else "") + same)
    return "; ".join(out)


def capacity_figure(curves: dict[str, dict[str, dict[str, float]]], out: Path) -> Path | None:
    """TTFT p90 against host GiB (0: HBM only), a line per router; the ceiling dashed."""
    if not curves:
        return None

    def draw(ax: Axes, by_router: dict[str, dict[str, float]]) -> None:
        for router, points in by_router.items():
            xs, ys = [], []
            for tier, y in points.items():
                if tier == HBM_ONLY:
                    xs.append(0.0)
                elif tier.startswith("host") and "disk" not in tier:
                    xs.append(float(tier.split()[1]))
                else:
                    continue
                ys.append(y)
            if xs:
                order = sorted(range(len(xs)), key=xs.__getitem__)
                (line,) = ax.plot(
                    [xs[i] for i in order], [ys[i] for i in order], marker="o", label=router
                )
                if CEILING in points:
                    ax.axhline(points[CEILING], ls="--", lw=0.8, color=line.get_color())
        ax.set_xlabel("host tier per instance (GiB)", fontsize=8)
        ax.set_ylabel("TTFT p90 (s)", fontsize=8)

    return panel_grid(sorted(curves.items()), draw, out, (4.2, 3.2), legend="first")


def tokens_over_time_figure(df: pl.DataFrame, out: Path, bin_s: float = 60.0) -> Path | None:
    """Stacked prompt tokens per time bin by where they came from, for one run."""
    pick = df.filter(
        pl.col("experiment").str.starts_with("tiers_agentic_hi")
        & (pl.col("tier") == DISK_SETUP)
        & (pl.col("policy") == OURS)
    )
    if pick.is_empty() or "host_tokens" not in pick.columns:
        return None
    first = sorted(set(pick["replicate"]))[0]
    run = pick.filter(pl.col("replicate") == first).with_columns(
        (pl.col("arrival_s") // bin_s).alias("bin"),
        pl.col("cached_tokens").fill_null(0).alias("hbm"),
        pl.col("host_tokens").fill_null(0).alias("host"),
        pl.col("disk_tokens").fill_null(0).alias("disk")
        if "disk_tokens" in pick.columns
        else pl.lit(0).alias("disk"),
    )
    run = run.with_columns(
        (pl.col("input_tokens") - pl.col("hbm") - pl.col("host") - pl.col("disk"))
        .clip(lower_bound=0)
        .alias("recomputed")
    )
    per = run.group_by("bin").agg(pl.col("hbm", "host", "disk", "recomputed").sum()).sort("bin")
    x = [b * bin_s / 60 for b in per["bin"].to_list()]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.stackplot(
        x,
        *[[v / 1e6 for v in per[c].to_list()] for c in ("hbm", "host", "disk", "recomputed")],
        labels=["HBM", "host", "disk", "recomputed"],
    )
    ax.set_xlabel("arrival time (min)")
    ax.set_ylabel("prompt tokens (millions) / min")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(f"agentic-long, {DISK_SETUP}, {OURS} ({first})", fontsize=9)
    fig.tight_layout()
    return save(fig, out)
