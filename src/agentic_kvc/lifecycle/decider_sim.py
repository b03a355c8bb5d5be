"""The calibrated split decider against fixed split thresholds, in the simulator, across loads.

`conditional_disagg` with `max_local_prefill_tokens` 256 and 2,048 (the peers' fixed
thresholds) and `calibrated_split` with the simulator's own costs (`params_from_sim`: the
H20 profile's prefill cost per token, `sim.kv_transfer_fixed_s`, `sim.kv_transfer_gbps`), each
on the H20 agentic base run at several session rates and seeds. Deterministic for its inputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.config import load_config
from agentic_kvc.metrics.summary import summarize
from agentic_kvc.policy.calibrated_split import params_from_sim

BASE = "config/runs/sim_h20_agentic.yaml"


def variants(cfg_sim: Any, hardware: str, model: str) -> dict[str, tuple[str, dict[str, Any]]]:
    cal = params_from_sim(hardware, model, cfg_sim.kv_transfer_fixed_s, cfg_sim.kv_transfer_gbps)
    return {
        "threshold_256": ("conditional_disagg", {"max_local_prefill_tokens": 256}),
        "threshold_2048": ("conditional_disagg", {"max_local_prefill_tokens": 2048}),
        "calibrated": ("calibrated_split", cal),
    }


def run(
    out: Path,
    rates: Sequence[float] = (0.25, 0.5, 1.0),
    seeds: Sequence[int] = (0, 1),
    sessions: int = 100,
    base: str = BASE,
) -> list[dict[str, Any]]:
    from agentic_kvc.sim.backend import prepare_sim, profile_for

    rows: list[dict[str, Any]] = []
    for rate in rates:
        for seed in seeds:
            sets = [
                f"seed={seed}",
                f"workload.generator.sessions={sessions}",
                f"workload.generator.params.session_rate_per_s={rate}",
            ]
            cfg0 = load_config(base, sets)
            vs = variants(cfg0.sim, cfg0.fleet.hardware, cfg0.fleet.model)
            for name, (policy, params) in vs.items():
                cfg = load_config(base, [*sets, f"policy.name={policy}"])
                cfg = cfg.model_copy(
                    update={"policy": cfg.policy.model_copy(update={"params": params})}
                )
                recs = prepare_sim(cfg)(profile_for(cfg))
                s = summarize(recs)["overall"]
                split = sum(
                    1 for r in recs if r.get("prefill_instance") != r.get("decode_instance")
                )
                rows.append(
                    {
                        "variant": name,
                        "rate": rate,
                        "seed": seed,
                        "ttft_p50_s": s["ttft_s"].get("p50"),
                        "ttft_p90_s": s["ttft_s"].get("p90"),
                        "requests": s["count"],
                        "split_share": split / len(recs) if recs else None,
                        "source": params.get("calibration_source"),
                    }
                )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def paired_table(rows: list[dict[str, Any]], metric: str = "ttft_p90_s") -> list[list[str]]:
    """Per rate: each variant's mean metric and calibrated - threshold paired over seeds."""
    out = []
    for rate in sorted({r["rate"] for r in rows}):
        at = [r for r in rows if r["rate"] == rate]
        by = {(r["variant"], r["seed"]): r for r in at}
        seeds = sorted({r["seed"] for r in at})
        line = [f"{rate}"]
        for v in ("threshold_256", "threshold_2048", "calibrated"):
            vals = [by[(v, s)][metric] for s in seeds if (v, s) in by]
            shares = [by[(v, s)]["split_share"] for s in seeds if (v, s) in by]
            line.append(f"{np.mean(vals):.2f} s ({np.mean(shares):.0%} split)")
        for v in ("threshold_256", "threshold_2048"):
            d = [by[("calibrated", s)][metric] - by[(v, s)][metric] for s in seeds]
            line.append(f"{np.mean(d):+.2f} s [{min(d):+.2f}, {max(d):+.2f}]")
        out.append(line)
    return out
