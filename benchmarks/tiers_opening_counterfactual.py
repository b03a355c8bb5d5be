"""Is predicted_ttft's gap to sticky_least_loaded on agentic-long with tiers where sessions open?

docs/kv_tiers/study_followups.md, "Thirty-one seeds". Over 31 seeds, predicted_ttft's TTFT p90 is
+3.7% [+0.3, +7.1] against sticky_least_loaded on agentic-long at 0.05 sessions/s with a 128 GiB
host tier (issue 29, goal 2). On TraceLab the whole gap was the session openings
(docs/kv_tiers/study_followups.md, section 4 of "Why predicted_ttft trails stickiness on TraceLab").
This asks the same here: three variants per seed, on the tiers study's cell settings
(`tiers_agentic_lo` of config/config.yaml):

- `sticky`: sticky_least_loaded;
- `ptt`: predicted_ttft as configured;
- `ptt_cf`: predicted_ttft, except that a session's first request (one sticky_least_loaded's
  rule has no home for) goes where sticky_least_loaded would put it: a shadow
  `StickyLeastLoaded` sees every request and places the openings; later turns are
  predicted_ttft's own. The shadow's home is where the session opened, so a later turn placed
  elsewhere is counted as moved.

Paired comparisons over the seeds (agentic_kvc.paired, the studies' bootstrap), TTFT p90 and
E2E p90, and the counts of openings placed differently and later turns moved. The wrapping is
this script's (the policy has no such mode).

    .venv/bin/python benchmarks/tiers_opening_counterfactual.py --seeds 31 \\
        --out results/bench/tiers_opening_counterfactual.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.paired import paired_compare, request_frame
from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.predicted_ttft import PredictedTTFT
from agentic_kvc.policy.session_affinity import StickyLeastLoaded
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from tiers_sweep import stamp, study  # noqa: E402

VARIANTS = (
    ("sticky", "sticky_least_loaded", False),
    ("ptt", "predicted_ttft", False),
    ("ptt_cf", "predicted_ttft", True),
)
COUNTS: dict[str, int] = {}


class OpeningsBySticky(PredictedTTFT):
    """predicted_ttft whose session openings are placed by sticky_least_loaded's rule."""

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        out = super().choose(request, fleet, candidates)
        shadow: StickyLeastLoaded | None = getattr(self, "_shadow", None)
        if shadow is None:
            shadow = self._shadow = StickyLeastLoaded()  # type: ignore[attr-defined]
        sid = request.session_id
        opening = sid is not None and sid not in shadow.home
        if sid is not None and not opening:
            COUNTS["later_turns"] = COUNTS.get("later_turns", 0) + 1
            if shadow.home[sid] != out[0].index:
                COUNTS["later_turns_moved"] = COUNTS.get("later_turns_moved", 0) + 1
        chosen = shadow.choose(request, fleet, candidates)[0]
        if not opening:
            return out
        COUNTS["openings"] = COUNTS.get("openings", 0) + 1
        if chosen.index != out[0].index:
            COUNTS["openings_placed_differently"] = COUNTS.get("openings_placed_differently", 0) + 1
        return chosen, "opening_by_sticky", out[2]


def run(cell: dict[str, Any], sets: list[str], counterfactual: bool) -> list[dict[str, Any]]:
    """One run of the cell (`study`) with `sets`, its request records (`counterfactual`:
    predicted_ttft's openings by sticky)."""
    base_sets = [f"{k}={v}" for k, v in cell["set"].items()]
    config = load_config(REPO / cell["base"], [*base_sets, *sets])
    fleet = SimFleet(config, load_workload(config.workload, config.seed), profile_for(config))
    if counterfactual:
        fleet.policy.__class__ = OpeningsBySticky  # the same params and state
    fleet.run()
    return [r.to_dict() for r in fleet.records]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, default=Path("results/bench/tiers_opening_counterfactual.json")
    )
    ap.add_argument("--seeds", type=int, default=31, help="seeds 0..N-1")
    ap.add_argument("--rate", type=float, default=0.05, help="sessions per second")
    ap.add_argument("--host-gib", type=float, default=128)
    args = ap.parse_args()
    cell = study("tiers_agentic_lo")
    frames = []
    for seed in range(args.seeds):
        for label, policy, cf in VARIANTS:
            sets = [
                f"workload.generator.params.session_rate_per_s={args.rate}",
                f"policy.name={policy}",
                f"fleet.kv_tiers.host_gib={args.host_gib}",
                f"seed={seed}",
            ]
            frames.append(
                request_frame(run(cell, sets, cf)).with_columns(
                    pl.lit(label).alias("variant"),
                    pl.lit(seed).alias("seed"),
                    pl.lit(cell["set"]["fleet.instances"]).alias("instances"),
                )
            )
    df = pl.concat(frames)
    rows = []
    for base, cand in (("sticky", "ptt"), ("sticky", "ptt_cf"), ("ptt", "ptt_cf")):
        for metric in ("ttft_p90", "e2e_p90"):
            r = paired_compare(df, base, cand, metric)
            rows.append(
                {
                    "baseline": base,
                    "candidate": cand,
                    "metric": metric,
                    "rel_diff": r.rel_diff,
                    "ci95": [r.ci_low, r.ci_high],
                    "pairs": r.n_pairs,
                    "requests_that_differ": r.n_differ,
                }
            )
            print(
                f"{cand} vs {base}, {metric}: {100 * r.rel_diff:+.1f}% "
                f"[{100 * r.ci_low:+.1f}, {100 * r.ci_high:+.1f}] over {r.n_pairs} seeds"
            )
    print(COUNTS)
    out = {
        **stamp("tiers_opening_counterfactual"),
        "parameters": {"seeds": args.seeds, "rate": args.rate, "host_gib": args.host_gib},
        "comparisons": rows,
        "counterfactual_counts": dict(COUNTS),
    }
    atomic_write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
