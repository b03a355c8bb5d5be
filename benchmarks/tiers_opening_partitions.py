"""How good are predicted_ttft's session openings on TraceLab, against random ones? (issue 29)

docs/kv_tiers/study_followups.md, TraceLab part, section 8. With a host tier neither predicted_ttft
nor sticky_least_loaded ever moves a session after its first turn, so on the study's 2-instance
TraceLab cells a run is decided by one thing: which instance each of the 48 sessions opens on
(section 4's counterfactual). Both routers end with 24 sessions on each instance; they differ in
which. This benchmark places the openings by a given sequence (a probe policy, defined here:
predicted_ttft for every later turn, the k-th session opening on `plan[k]`) and compares, per seed
of the study's session jitter:

- today's predicted_ttft and sticky_least_loaded (which alternates: 0, 1, 0, 1, ...);
- `--random` balanced random partitions (24 openings on each instance in a random order, seeded
  by the seed), the distribution a router blind to everything but the final count would draw;
- two properties of a partition a router could aim for, each with its rank correlation with
  TTFT p90 over the random partitions of a seed: the prefix imbalance, mean over k of |opened
  on 0 - opened on 1| among the first k openings (alternation: 0.5; a random order of 48:
  about 2), and the phase alignment, the sum over pairs of sessions on one instance of
  exp(-|difference of their opening times| / 1 s) (sessions that open together may come back
  together).

    nice -n 10 .venv/bin/python benchmarks/tiers_opening_partitions.py \\
        --out results/bench/tiers_opening_partitions.json

About two minutes per cell on one core (a run of 303 requests takes ~0.1 s). Deterministic.
Needs results/traces/tracelab_multi_session_sample.csv (`snakemake --cores 1 traces`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agentic_kvc.config import RunConfig, load_config, override_item
from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.predicted_ttft import PredictedTTFT
from agentic_kvc.policy.registry import list_policies, register
from agentic_kvc.sim.run_backend import prepare_sim, profile_for

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from tiers_sweep import stamp  # noqa: E402

PROBE = "predicted_ttft_planned_open"


class PlannedOpenings(PredictedTTFT):
    """predicted_ttft whose k-th session opening goes to instance `plan[k]`. A probe."""

    name = PROBE
    plan: Sequence[int] = ()

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.opened: set[str] = set()

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        sid = request.session_id
        if sid is None or sid in self.opened:
            return super().choose(request, fleet, candidates)
        want = self.plan[len(self.opened) % len(self.plan)]
        self.opened.add(sid)
        best = next((c for c in candidates if c.index == want), None)
        if best is None:  # the planned instance is not a candidate: as today
            return super().choose(request, fleet, candidates)
        super().choose(request, fleet, candidates)  # keeps the reload bookkeeping as today
        return best, "planned_opening", {}


def _config(cell: str, sets: Sequence[str]) -> RunConfig:
    exps = {
        e["name"]: e
        for e in yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    }
    exp = exps[cell]
    fixed = [override_item(k, v) for k, v in (exp.get("set") or {}).items()]
    return load_config(REPO / exp["base"], [*fixed, *sets])


def run(cell: str, policy: str, seed: int, host: float) -> list[dict[str, Any]]:
    sets = [
        override_item("policy.name", policy),
        override_item("seed", seed),
        override_item("fleet.kv_tiers.host_gib", host),
    ]
    cfg = _config(cell, sets)
    return prepare_sim(cfg)(profile_for(cfg))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Rank correlation (no tie correction: p90s of distinct runs rarely tie)."""
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    return float(np.corrcoef(rx, ry)[0, 1])


def p90(recs: list[dict[str, Any]]) -> float:
    return float(np.percentile([r["ttft_s"] for r in recs], 90))


def openings(recs: list[dict[str, Any]]) -> list[int]:
    """The instance of each session's first turn, in the order the sessions opened."""
    first: dict[str, dict[str, Any]] = {}
    for r in sorted(recs, key=lambda r: r["arrival_s"]):
        first.setdefault(r["session_id"], r)
    return [r["prefill_instance"] for r in first.values()]


def prefix_imbalance(plan: Sequence[int]) -> float:
    diff, total = 0, 0
    for k in plan:
        diff += 1 if k == 0 else -1
        total += abs(diff)
    return total / len(plan)


def openings_at(recs: list[dict[str, Any]]) -> list[float]:
    """Each session's first arrival, in the order the sessions opened."""
    first: dict[str, float] = {}
    for r in sorted(recs, key=lambda r: r["arrival_s"]):
        first.setdefault(r["session_id"], r["arrival_s"])
    return list(first.values())


def alignment(times: Sequence[float], plan: Sequence[int], tau_s: float = 1.0) -> float:
    t = np.asarray(times)
    same = np.equal.outer(np.asarray(plan), np.asarray(plan))
    near = np.exp(-np.abs(np.subtract.outer(t, t)) / tau_s)
    return float((near * same).sum() - len(t)) / 2  # pairs, each once, not itself


def cell_report(cell: str, seeds: Sequence[int], n_random: int, host: float) -> dict[str, Any]:
    per_seed = []
    for seed in seeds:
        today_recs = run(cell, "predicted_ttft", seed, host)
        sticky_recs = run(cell, "sticky_least_loaded", seed, host)
        n_open = len(openings(today_recs))
        times = openings_at(today_recs)  # the same in every run of a seed (the trace's)
        rng = random.Random(1000 + seed)
        rand, imb, phase = [], [], []
        for _ in range(n_random):
            plan = [0] * (n_open // 2) + [1] * (n_open - n_open // 2)
            rng.shuffle(plan)
            PlannedOpenings.plan = plan
            rand.append(p90(run(cell, PROBE, seed, host)))
            imb.append(prefix_imbalance(plan))
            phase.append(alignment(times, plan))
        rs = np.array(rand)
        today, sticky = p90(today_recs), p90(sticky_recs)
        per_seed.append(
            {
                "seed": seed,
                "today": today,
                "sticky": sticky,
                "random": rand,
                "today_pct": float(np.mean(rs < today)),
                "sticky_pct": float(np.mean(rs < sticky)),
                "today_imbalance": prefix_imbalance(openings(today_recs)),
                "sticky_imbalance": prefix_imbalance(openings(sticky_recs)),
                "random_imbalance": imb,
                "spearman_imbalance_p90": spearman(imb, rand),
                "today_alignment": alignment(times, openings(today_recs)),
                "sticky_alignment": alignment(times, openings(sticky_recs)),
                "random_alignment": phase,
                "spearman_alignment_p90": spearman(phase, rand),
            }
        )
        print(cell, json.dumps({k: v for k, v in per_seed[-1].items() if "random" not in k}))

    def rel(key: str) -> dict[str, Any]:
        """`key`'s TTFT p90 relative to the median random partition, over seeds (bootstrap)."""
        x = np.array([s[key] / float(np.median(s["random"])) - 1 for s in per_seed])
        boot = np.random.default_rng(0).choice(x, (10_000, len(x))).mean(axis=1)
        return {
            "mean": float(x.mean()),
            "ci": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))],
            "mean_percentile": float(np.mean([s[f"{key}_pct"] for s in per_seed])),
        }

    return {
        "host_gib": host,
        "random_per_seed": n_random,
        "seeds": per_seed,
        "today_vs_random_median": rel("today"),
        "sticky_vs_random_median": rel("sticky"),
        "mean_spearman_imbalance_p90": float(
            np.mean([s["spearman_imbalance_p90"] for s in per_seed])
        ),
        "mean_spearman_alignment_p90": float(
            np.mean([s["spearman_alignment_p90"] for s in per_seed])
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out", type=Path, default=REPO / "results/bench/tiers_opening_partitions.json"
    )
    ap.add_argument("--cells", default="tiers_tracelab_hi,tiers_tracelab_lo")
    ap.add_argument("--seeds", type=int, default=11, help="seeds 0..N-1 of the session jitter")
    ap.add_argument("--random", type=int, default=20, help="random partitions per seed")
    ap.add_argument("--host-gib", type=float, default=16.0)
    args = ap.parse_args()
    if PROBE not in list_policies():
        register(PlannedOpenings)
    cells = {
        cell: cell_report(cell, range(args.seeds), args.random, args.host_gib)
        for cell in args.cells.split(",")
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**stamp("tiers_opening_partitions"), **cells}, indent=1) + "\n")
    for cell, r in cells.items():
        t, s = r["today_vs_random_median"], r["sticky_vs_random_median"]
        print(
            f"{cell}: today {100 * t['mean']:+.1f}% [{100 * t['ci'][0]:+.1f}, "
            f"{100 * t['ci'][1]:+.1f}] (mean percentile {100 * t['mean_percentile']:.0f}), "
            f"sticky {100 * s['mean']:+.1f}% [{100 * s['ci'][0]:+.1f}, {100 * s['ci'][1]:+.1f}] "
            f"(mean percentile {100 * s['mean_percentile']:.0f}) against the median random "
            f"partition; Spearman with p90: prefix imbalance "
            f"{r['mean_spearman_imbalance_p90']:+.2f}, phase alignment "
            f"{r['mean_spearman_alignment_p90']:+.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
