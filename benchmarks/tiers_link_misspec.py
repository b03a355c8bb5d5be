"""How wrong may predicted_ttft's link numbers be (issue 29 item 4, goal 2)?

docs/kv_tiers/study_followups.md, "How wrong may the router's link numbers be". predicted_ttft
prices each candidate's reload below HBM by time: bytes over the host->device link (and the disk
read), plus the link's queue (policy/tier_pricing.py). Its link numbers (`tier_host_h2d_gbps`,
`tier_host_latency_s`, `tier_disk_read_gbps`, `tier_disk_latency_s`) default to the hardware
profile's (profiles/hardware.py `tier_links`), which are exactly the simulated engine's links: in
every simulated comparison the router holds the simulator's own physics. This runs it with link
numbers wrong in known ways, beside today's predicted_ttft (exact links) and the cell's best peer,
on cells of the tiers study and one held-out cell, through `akvc run-batch` into a scratch results
folder (one process, one cell at a time), and pairs TTFT p90 / E2E p90 over the replicates
(agentic_kvc.paired's two-level bootstrap, through tiers_tracelab_gap's `compare`).

The grid, fixed before any run (nothing here was tuned to a result):

- variants of predicted_ttft (`variants`): `exact` (today's: every link number None, so the
  profile's); `bw_x0.25`, `bw_x0.5`, `bw_x2`, `bw_x4` (host h2d and disk read bandwidth both
  scaled against the profile's, latencies the profile's); `lat_x10` (both per-transfer
  latencies x10, bandwidths the profile's); `no_reload` (bandwidth 1e6 GB/s and latency 0:
  what a tier holds still counts as held, but a reload costs nothing; the far end of "too
  fast", and the reference that says how much the reload term decides at all). The wrong
  variants set all four numbers explicitly, so a change of the defaults cannot make them
  the exact one.
  Added after that sweep (2026-11-29): `tiers_unseen` (`tier_pricing: false`: what the tiers
  hold is not counted as held, predicted_ttft as without tiers), which says whether its lead
  comes from seeing the tiers at all.
- peers: the study's other routers (`tiers.ROUTERS`); the best peer is picked per cell as the
  study picks it (`tiers.best_peer_of`: lowest TTFT p90 pooled over the replicates' error-free
  requests).
- cells (the study's settings from config/config.yaml, plus the tier setup):
  Mooncake x0.2 on 4 x H20, host 128 GiB, and host 16 GiB + a node's 1 TiB NVMe
  (`tiers_mooncake_hi_disk`), the study's three 600 s windows; agentic-long 0.1 sessions/s
  (`tiers_agentic_hi`) host 128 GiB, seeds 0-4; TraceLab x2 (`tiers_tracelab_hi`) host
  16 GiB, seeds 0-10 of the study's session jitter; held out (no issue names it): the Mooncake
  trace on 8 x H20 at x0.4 (the x0.2 cell's load per instance on twice the fleet), host
  16 GiB, the three windows.

Per cell and variant: the paired TTFT p90 / E2E p90 against `exact` and against the best peer,
and how often its routing differs from `exact`'s (the share of requests, matched by id within
a replicate, placed on another instance; the replicates whose placements are all the same).

    nice -n 10 .venv/bin/python benchmarks/tiers_link_misspec.py \\
        --results /tmp/akvc_k8_results --out results/bench/tiers_link_misspec.json

`--table` prints the JSON as docs/kv_tiers/study_followups.md's table; CLI, loop, JSON:
benchmarks/tiers_sweep.py (a rerun's batch seconds count only the runs the results folder did not
hold).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.tiers import (
    TIERS_UNSEEN,
    against_exact_links,
    excludes_zero,
)
from agentic_kvc.analysis.studies import tiers
from agentic_kvc.config import load_config, override_item
from agentic_kvc.profiles.hardware import tier_links

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiers_sweep import REPO, WINDOWS, Rows, Run, Unit, cell_runs, ci_cell, pooled, study
from tiers_sweep import main as sweep
from tiers_tracelab_gap import compare

SCALES = (0.25, 0.5, 2.0, 4.0)  # host h2d and disk read bandwidth, against the profile's
LATENCY_SCALE = 10.0
EXACT = "exact"
PEERS = tuple(r for r in tiers.ROUTERS if r != tiers.OURS)
# A reload that costs nothing: 1e6 GB/s moves a 100k-token context (~10 GB) in 10 us.
FREE_GBPS = 1e6


def variants(hardware: str) -> dict[str, dict[str, Any]]:
    """predicted_ttft's policy spec per variant label, its link numbers from `hardware`'s
    profile (the simulator's own links when the run sets none in fleet.kv_tiers)."""
    links = tier_links(hardware)
    ours = tiers.OURS

    def spec(h2d: float, host_lat: float, disk: float, disk_lat: float) -> dict[str, Any]:
        params = {
            "tier_host_h2d_gbps": h2d,
            "tier_host_latency_s": host_lat,
            "tier_disk_read_gbps": disk,
            "tier_disk_latency_s": disk_lat,
        }
        return {"name": ours, "params": params}

    out: dict[str, dict[str, Any]] = {EXACT: {"name": ours}}
    for s in SCALES:
        out[f"bw_x{s:g}"] = spec(
            links.host_h2d_gbps * s,
            links.host_latency_s,
            links.disk_read_gbps * s,
            links.disk_latency_s,
        )
    out[f"lat_x{LATENCY_SCALE:g}"] = spec(
        links.host_h2d_gbps,
        links.host_latency_s * LATENCY_SCALE,
        links.disk_read_gbps,
        links.disk_latency_s * LATENCY_SCALE,
    )
    out["no_reload"] = spec(FREE_GBPS, 0.0, FREE_GBPS, 0.0)
    # Added after the first sweep: blocks below HBM not counted as held at all (predicted_ttft
    # as without tiers), which says whether the lead comes from seeing the tiers.
    out[TIERS_UNSEEN] = {"name": ours, "params": {"tier_pricing": False}}
    return out


def cells() -> list[dict[str, Any]]:
    """Each: name, base, fixed settings (tier setup included), the replicate key and values."""
    moon = study("tiers_mooncake_hi")
    moon8 = study("tiers_mooncake_hi")
    moon8["set"].update({"fleet.instances": 8, "workload.rate_scale": 0.4})
    agentic = study("tiers_agentic_hi")
    tracelab = study("tiers_tracelab_hi")
    return [
        {
            "name": "mooncake_x0.2/host_128",
            "base": moon["base"],
            "set": {**moon["set"], "fleet.kv_tiers.host_gib": 128},
            "rep": ("workload.window_s", WINDOWS),
        },
        {
            "name": "mooncake_x0.2/host_16+disk",
            **study("tiers_mooncake_hi_disk"),
            "rep": ("workload.window_s", WINDOWS),
        },
        {
            "name": "agentic-long_0.1/host_128",
            "base": agentic["base"],
            "set": {**agentic["set"], "fleet.kv_tiers.host_gib": 128},
            "rep": ("seed", list(range(5))),
        },
        {
            "name": "tracelab_x2/host_16",
            "base": tracelab["base"],
            "set": {**tracelab["set"], "fleet.kv_tiers.host_gib": 16},
            "rep": ("seed", list(range(11))),
        },
        {
            "name": "heldout_mooncake_8xH20_x0.4/host_16",
            "base": moon8["base"],
            "set": {**moon8["set"], "fleet.kv_tiers.host_gib": 16},
            "rep": ("workload.window_s", WINDOWS),
        },
    ]


def cell_hardware(cell: dict[str, Any]) -> str:
    """The cell's fleet hardware; refuses a cell that sets its own link numbers (then the
    profile's would not be the simulator's, and `exact` would not be exact)."""
    sets = [override_item(k, v) for k, v in cell["set"].items()]
    fleet = load_config(REPO / cell["base"], sets).fleet
    tiers_cfg = fleet.kv_tiers
    for name in ("host_h2d_gbps", "host_latency_s", "disk_read_gbps", "disk_latency_s"):
        if getattr(tiers_cfg, name) is not None:
            raise ValueError(f"{cell['name']} sets fleet.kv_tiers.{name}: not the profile's")
    return fleet.hardware


def specs(cell: dict[str, Any]) -> list[Run]:
    """(variant or peer, replicate, overrides) of one cell."""
    pols = {**variants(cell_hardware(cell)), **{p: {"name": p} for p in PEERS}}
    return cell_runs(cell, pols, [])


def placements(rows: Rows, label: str) -> dict[str, float | int]:
    """How `label`'s routing differs from `exact`'s: the share of requests (matched by id
    within a replicate) placed on another instance, and the replicates with every placement
    the same."""
    exact = {rep: rs for lab, rep, rs in rows if lab == EXACT}
    moved = total = same_reps = 0
    for lab, rep, rs in rows:
        if lab != label:
            continue
        where = {r["request_id"]: r["prefill_instance"] for r in exact[rep]}
        diff = sum(where.get(r["request_id"]) != r["prefill_instance"] for r in rs)
        moved += diff
        total += len(rs)
        same_reps += diff == 0
    return {"moved_share": round(moved / total, 4) if total else 0.0, "same_reps": same_reps}


def reloads(rows: Rows) -> dict[str, float]:
    """Over `exact`'s runs: the share of requests that reload from a tier, their mean reload
    wait (queue and transfer, `reload_wait_s`) and median reloaded tokens, and the reload wait
    as a share of all TTFT: how much of what the router is pricing the link numbers touch."""
    recs = [r for lab, _rep, rs in rows if lab == EXACT for r in rs if r.get("error") is None]
    tier_toks = sorted(
        r.get("host_tokens", 0) + r.get("disk_tokens", 0)
        for r in recs
        if r.get("host_tokens", 0) + r.get("disk_tokens", 0)
    )
    waits = [r.get("reload_wait_s") or 0.0 for r in recs]
    ttft = sum(r["ttft_s"] for r in recs)
    n = len(tier_toks)
    return {
        "requests_reloading_share": round(n / len(recs), 4) if recs else 0.0,
        "reload_wait_s_mean": round(sum(waits) / n, 4) if n else 0.0,
        "reloaded_tokens_p50": tier_toks[n // 2] if n else 0,
        "reload_wait_share_of_ttft": round(sum(waits) / ttft, 4) if ttft else 0.0,
    }


def analyse(unit: Unit, rows: Rows, _results: Path) -> dict[str, Any]:
    """One cell: its links, the best peer, the pooled TTFT p90s, what exact links reload, and
    per variant its comparison with the best peer and (not `exact`) with exact links, and
    where it places requests elsewhere than exact."""
    cell, n = unit.cell, unit.instances
    summ = {lab: pooled(rows, lab) for lab in dict.fromkeys(lab for lab, _r, _s in unit.runs)}
    best = tiers.best_peer_of(summ, PEERS)
    assert best is not None
    hardware = cell_hardware(cell)
    labels = list(variants(hardware))
    res: dict[str, Any] = {
        "hardware": hardware,
        "profile_links": tier_links(hardware).__dict__,
        "variant_specs": variants(hardware),
        "replicates": len(cell["rep"][1]),
        "best_peer": best,
        "ttft_p90_s": {k: round(v["ttft_p90"], 4) for k, v in summ.items()},
        "exact_token_shares": {
            k: round(summ[EXACT][k], 4) for k in ("hbm", "host", "disk", "recomputed")
        },
        "exact_reloads": reloads(rows),
        "variants": {},
    }
    for lab in labels:
        v: dict[str, Any] = {"vs_best_peer": compare(rows, best, lab, n)}
        if lab != EXACT:
            v["vs_exact"] = compare(rows, EXACT, lab, n)
            v["placement"] = placements(rows, lab)
        res["variants"][lab] = v
    return res


def headline(report: dict[str, Any]) -> dict[str, float | int]:
    """Top-level figures over every cell (what REPORT.md's benchmark table shows of this
    file): runs, batch CPU seconds (of the call that wrote the file: runs already in the
    results folder are not run again), the paired intervals of a wrong-link variant against
    exact links that exclude 0 (TTFT p90 and E2E p90) and the largest |TTFT p90 change| among
    them, and the same two for `tiers_unseen` (not a link variant: tiers not seen at all)."""
    cells = report["cells"].values()
    links, unseen = against_exact_links(report), against_exact_links(report, links=False)

    def excluding_0(vs: list[dict[str, Any]]) -> int:
        return sum(excludes_zero(m) for c in vs for m in c.values())

    out: dict[str, float | int] = {
        "runs": sum(r["runs"] for r in cells),
        "batch_cpu_s": round(sum(r["batch_cpu_s"] for r in cells), 1),
        "intervals_vs_exact_excluding_0": excluding_0(links),
        "largest_ttft_p90_change_vs_exact": max(abs(c["ttft_p90"]["rel"]) for c in links),
    }
    if unseen:
        out["tiers_unseen_intervals_excluding_0"] = excluding_0(unseen)
        out["tiers_unseen_largest_ttft_p90_change"] = max(abs(c["ttft_p90"]["rel"]) for c in unseen)
    return out


def table(units: dict[str, Any]) -> str:
    """Per cell: exact against the best peer, then each variant against exact and against the
    best peer (TTFT p90 / E2E p90), and the share of requests it places elsewhere than exact;
    then, per cell, what the exact runs reload (`reloads`)."""
    rows = [
        "| cell | best peer | variant | vs exact links | vs best peer | requests moved |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in units.items():
        for lab, v in r["variants"].items():
            vs_exact = ci_cell(v["vs_exact"]) if "vs_exact" in v else "-"
            moved = (
                f"{100 * v['placement']['moved_share']:.1f}% "
                f"({v['placement']['same_reps']}/{r['replicates']} same)"
                if "placement" in v
                else "-"
            )
            rows.append(
                f"| {key} | {r['best_peer']} | {lab} | {vs_exact} | "
                f"{ci_cell(v['vs_best_peer'])} | {moved} |"
            )
    rows += [
        "",
        "| cell (exact links) | requests reloading | reloaded tokens, median | "
        "reload wait per reloading request, mean s | reload wait / all TTFT |",
        "|---|---|---|---|---|",
    ]
    for key, r in units.items():
        e = r["exact_reloads"]
        rows.append(
            f"| {key} | {100 * e['requests_reloading_share']:.1f}% | "
            f"{e['reloaded_tokens_p50']:,} | {e['reload_wait_s_mean']:.3f} | "
            f"{100 * e['reload_wait_share_of_ttft']:.2f}% |"
        )
    return "\n".join(rows)


def main() -> int:
    return sweep(
        "tiers_link_misspec",
        __doc__,
        Path("/tmp/akvc_k8_results"),
        lambda: (Unit(c["name"], c, specs(c)) for c in cells()),
        analyse,
        table,
        layout="cells",
        headline=headline,
    )


if __name__ == "__main__":
    raise SystemExit(main())
