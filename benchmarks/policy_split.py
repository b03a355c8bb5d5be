"""predicted_ttft with split candidates against colocate-only, calibrated_split and the best peer.

Runs the robustness sweep's machinery (benchmarks/policy_robustness.py: same scenarios, seeds,
windows, per-run cache under --work) on workloads where splitting prefill from decode could
matter (long prompts, a heavy tail, the Mooncake trace, 16 instances) plus two fleets with
prefill-only / decode-only roles, and pairs (agentic_kvc.paired, 95% two-level bootstrap, seeds
paired):

- `predicted_ttft:split=true` vs `predicted_ttft` (the same policy, colocate only),
- each of ours vs the scenario's best peer (lowest pooled TTFT p90 among the peers),

on TTFT p90 and E2E p90, and counts the share of requests each split policy disaggregated.
The split variant's transfer numbers are the scenario's `sim.kv_transfer_fixed_s` /
`kv_transfer_gbps` and the profile's KV bytes per token (policy_robustness.policy_sets), as
are calibrated_split's (`params_from_sim`).

    ulimit -v 8000000; flock /tmp/akvc_cpu.lock .venv/bin/python benchmarks/policy_split.py \\
        --out results/bench/policy_split.json --md results/bench/policy_split.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import polars as pl

from agentic_kvc.paired import paired_compare

# The sweep's machinery, imported by name from this folder (also when this script is loaded by
# path, as workflow/scripts/sweep_batch.py does): one module object however it is reached.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import policy_robustness as rb

COLO, SPLIT, CAL = "predicted_ttft", "predicted_ttft:split=true", "calibrated_split"
OURS = (COLO, SPLIT, CAL)
SPLIT_REASONS = {SPLIT: "min_predicted_ttft_split", CAL: "split_pays"}

_PD = ["prefill"] * 4 + ["decode"] * 4
_MIXED = ["prefill"] * 2 + ["combined"] * 6
# Fleets with roles (not in the robustness sweep): 4 prefill-only + 4 decode-only instances,
# and 2 prefill-only beside 6 combined ones, on the heavy-tail preset.
rb.SCENARIOS.update(
    {
        "pd_4p4d": ("split", rb.AGENTIC, [f"fleet.roles={json.dumps(_PD)}"]),
        "pd_mixed_heavy_tail": (
            "split",
            rb.AGENTIC,
            [f"{rb.GEN}.preset=heavy-tail", f"fleet.roles={json.dumps(_MIXED)}"],
        ),
    }
)
DEFAULT = "heavy_tail,long,long_fleet16,mooncake,mooncake_fast,pd_4p4d,pd_mixed_heavy_tail"


def analyse(scenario: str, df: pl.DataFrame) -> dict:
    peers = [p for p in rb.PEERS if p in set(df["policy"])]
    ttft = {p: rb.p90(df.filter(pl.col("policy") == p), "ttft_s") for p in df["policy"].unique()}
    e2e = {p: rb.p90(df.filter(pl.col("policy") == p), "e2e_s") for p in df["policy"].unique()}
    best = min(peers, key=lambda p: ttft[p])
    out: dict = {
        "scenario": scenario,
        "best_peer": best,
        "ttft_p90": ttft,
        "e2e_p90": e2e,
        "errors": {
            p: int(df.filter((pl.col("policy") == p) & (pl.col("error") != "")).height)
            for p in ttft
        },
        "split_share": {
            p: round(
                df.filter((pl.col("policy") == p) & (pl.col("reason") == r)).height
                / max(df.filter(pl.col("policy") == p).height, 1),
                4,
            )
            for p, r in SPLIT_REASONS.items()
        },
        "vs_peer": {},
    }
    for o in OURS:
        out["vs_peer"][o] = {
            m: paired_compare(df, best, o, m, by="policy").to_row() for m in ("ttft_p90", "e2e_p90")
        }
    out["split_vs_colo"] = {
        m: paired_compare(df, COLO, SPLIT, m, by="policy").to_row() for m in ("ttft_p90", "e2e_p90")
    }
    return out


def markdown(results: list[dict]) -> str:
    head = [
        "scenario",
        "best peer (TTFT p90 s)",
        "colo TTFT p90 s",
        "split TTFT p90 s",
        "split vs colo: TTFT p90",
        "split vs colo: E2E p90",
        "split vs peer: TTFT p90",
        "split vs peer: E2E p90",
        "calibrated_split vs peer: TTFT p90",
        "split share (ours / calibrated)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        peer = r["best_peer"]
        share = r["split_share"]
        row = [
            r["scenario"],
            f"{peer} ({r['ttft_p90'][peer]:.2f})",
            f"{r['ttft_p90'][COLO]:.2f}",
            f"{r['ttft_p90'][SPLIT]:.2f}",
            rb.cell(r["split_vs_colo"]["ttft_p90"]),
            rb.cell(r["split_vs_colo"]["e2e_p90"]),
            rb.cell(r["vs_peer"][SPLIT]["ttft_p90"]),
            rb.cell(r["vs_peer"][SPLIT]["e2e_p90"]),
            rb.cell(r["vs_peer"][CAL]["ttft_p90"]),
            f"{100 * share[SPLIT]:.1f}% / {100 * share[CAL]:.1f}%",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenarios", default=DEFAULT, help="comma list of scenario names")
    ap.add_argument("--seeds", type=int, default=len(rb.SEEDS), help="replicates per policy")
    ap.add_argument("--work", type=Path, default=rb.REPO / "results" / "robustness")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every scenario's results")
    ap.add_argument("--md", type=Path, default=None, help="the markdown table")
    a = ap.parse_args()
    results = []
    for sc in a.scenarios.split(","):
        t0 = time.perf_counter()
        frames = [
            rb.run_one(sc, p, s, a.work)
            for p in [*rb.PEERS, *OURS]
            for s in range(rb.REPLICATES.get(sc, a.seeds))
        ]
        res = analyse(sc, pl.concat(frames, how="vertical_relaxed"))
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        print(markdown([res]).splitlines()[-1], f"({res['wall_s']} s)", flush=True)
    md = markdown(results)
    print(md)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"benchmark": "policy_split", "seeds": a.seeds, "ours": list(OURS)}
        a.out.write_text(json.dumps({**doc, "scenarios": results}, indent=1))
    rb.write_md(a.md, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
