"""The calibrated split decider against fixed split thresholds, in the simulator, across loads.

`conditional_disagg` with `max_local_prefill_tokens` 256 and 2,048 (the peers' fixed
thresholds) and `calibrated_split` with the simulator's own costs (`params_from_sim`: the
H20 profile's prefill cost per token, `sim.kv_transfer_fixed_s`, `sim.kv_transfer_gbps`), each
on the H20 agentic base run at several session rates and seeds. Deterministic for its inputs.

Outputs: one summary row per (variant, rate, seed) in `out` (JSON lines) and every request's
latencies in `requests_path(out)` (parquet), from which `paired_rows` compares calibrated with
each threshold per rate with `agentic_kvc.paired` (seeds, then requests, resampled as pairs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.metrics.summary import summarize
from agentic_kvc.paired import REQUEST_SCHEMA, fmt_diff, paired_compare
from agentic_kvc.policy.calibrated_split import params_from_sim

BASE = "config/runs/sim_h20_agentic.yaml"
THRESHOLDS = ("threshold_256", "threshold_2048")
CANDIDATE = "calibrated"
# The request columns kept per run: those agentic_kvc.paired reads, and where each decoded (the
# labels that select and pair runs are added beside them).
REQUEST_COLUMNS = (*REQUEST_SCHEMA, "decode_instance")


def requests_path(out: Path) -> Path:
    """Where `run` keeps the per-request latencies next to its summary rows."""
    return out.with_name(out.stem + "_requests.parquet")


def variants(cfg_sim: Any, hardware: str, model: str) -> dict[str, tuple[str, dict[str, Any]]]:
    cal = params_from_sim(hardware, model, cfg_sim.kv_transfer_fixed_s, cfg_sim.kv_transfer_gbps)
    return {
        "threshold_256": ("conditional_disagg", {"max_local_prefill_tokens": 256}),
        "threshold_2048": ("conditional_disagg", {"max_local_prefill_tokens": 2048}),
        CANDIDATE: ("calibrated_split", cal),
    }


def run(
    out: Path,
    rates: Sequence[float] = (0.25, 0.5, 1.0),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    sessions: int = 100,
    base: str = BASE,
) -> list[dict[str, Any]]:
    from agentic_kvc.sim.run_backend import prepare_sim, profile_for

    rows: list[dict[str, Any]] = []
    req_rows: list[dict[str, Any]] = []
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
                labels = {
                    "variant": name,
                    "rate": rate,
                    "seed": seed,
                    "instances": cfg.fleet.instances,
                }
                req_rows += [{**labels, **{k: r.get(k) for k in REQUEST_COLUMNS}} for r in recs]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    requests_frame(req_rows).write_parquet(requests_path(out))
    return rows


def requests_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    schema = {
        "variant": pl.String,
        "rate": pl.Float64,
        "seed": pl.Int64,
        "instances": pl.Int64,
        **REQUEST_SCHEMA,
        "decode_instance": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)


def paired_rows(
    requests: pl.DataFrame, metric: str = "ttft_p90", n_boot: int = 1000
) -> list[dict[str, Any]]:
    """Per rate and threshold: calibrated vs the threshold, paired over seeds (and requests)."""
    out = []
    for rate in sorted(requests.get_column("rate").unique().to_list()):
        at = requests.filter(pl.col("rate") == rate)
        for base in THRESHOLDS:
            r = paired_compare(at, base, CANDIDATE, metric, n_boot=n_boot).to_row()
            out.append({"rate": rate, **r})
    return out


def split_shares(requests: pl.DataFrame) -> dict[tuple[float, str], float]:
    """Share of requests split (prefill and decode on different instances), seeds pooled."""
    df = requests.group_by("rate", "variant").agg(
        (pl.col("prefill_instance") != pl.col("decode_instance")).mean().alias("share")
    )
    return {(r["rate"], r["variant"]): r["share"] for r in df.iter_rows(named=True)}


def paired_table(
    requests: pl.DataFrame, metric: str = "ttft_p90", pairs: list[dict[str, Any]] | None = None
) -> list[list[str]]:
    """Rows: rate, each variant's metric (seeds pooled) with its split share, and calibrated
    vs each threshold as a relative difference with its 95% paired interval (`pairs`: the
    `paired_rows` already computed for `metric`)."""
    shares = split_shares(requests)
    pairs = paired_rows(requests, metric) if pairs is None else pairs
    lines = []
    for rate in sorted({p["rate"] for p in pairs}):
        at = [p for p in pairs if p["rate"] == rate]
        vals = {p["baseline"]: p["baseline_value"] for p in at}
        vals[CANDIDATE] = at[0]["candidate_value"]
        line = [f"{rate}"]
        for v in (*THRESHOLDS, CANDIDATE):
            line.append(f"{vals[v]:.2f} s ({shares.get((rate, v), float('nan')):.0%} split)")
        line += [fmt_diff(p) for p in at]
        line.append(str(at[0]["n_pairs"]))
        lines.append(line)
    return lines


PAIRED_HEADER = [
    "rate/s",
    "threshold 256",
    "threshold 2048",
    "calibrated",
    "cal vs 256",
    "cal vs 2048",
    "seeds",
]
