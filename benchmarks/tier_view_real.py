"""Can a router without KV events follow a real engine's host tier? (docs/kv_tiers_real.md, 8)

The real tiers study's fleet with its host tier (config/runs/real_cpu_tiers.yaml,
`fleet.kv_tiers.host_gib` 0.0625: two tiny-model vLLM CPU engines of 129 KV blocks, a 64 MiB
lazy host tier each, the token-scaled agentic workload) routed by `predicted_ttft` on two
views, repeat by repeat, the order flipping every repeat:
- `exact`: the engines' KV events, each block filed under its tier's medium;
- `estimated` with the tier view (`--tier-view`): the prompts the proxy routed, an HBM LRU per
  engine sized by its KV blocks and a host LRU sized and fed as the engine states in
  `vllm:simple_kv_offload_info` (proxy/cache_view.py).
Per run: the prompt tokens the engines' host tiers served (their counters, growth over the run)
and the tokens the view expected from the host tier for the requests it routed (records'
`predicted_host_tokens`); per request, the view's whole expectation (HBM and host) against the
engine's cached tokens; TTFT p50 / p90, E2E p90. Per view: expected / served over all runs
(the exact view's was 94% in the study's first campaign). Between the views: TTFT paired over
repeats (`paired_compare`, request bootstrap within resampled repeats).

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/tier_view_real.py \
        --out results/bench/tier_view_real.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
from tier_recency_real import facts_at_start, run_facts  # the real benchmarks' header

from agentic_kvc.analysis.studies.common import beyond_spread, repeat_spread
from agentic_kvc.analysis.studies.tiers_real import engine_host_tokens
from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.paired import paired_compare
from agentic_kvc.runs import execute
from agentic_kvc.serve.run_backend import fleets_launched, shared_fleets

BASE = "config/runs/real_cpu_tiers.yaml"
HOST = ["fleet.kv_tiers.host_gib=0.0625"]
POLICY = [
    "policy.name=predicted_ttft",
    "policy.params.hardware=cpu-tiny",
    "policy.params.model=tiny",
    "policy.params.max_num_batched_tokens=8192",
]
VIEWS = ("exact", "estimated")


def configs(repeats: int) -> list[tuple[str, int, RunConfig]]:
    """(view, repeat, config), repeat-major, the first view flipping every repeat."""
    out = []
    for r in range(repeats):
        for view in VIEWS if r % 2 == 0 else VIEWS[::-1]:
            sets = [*HOST, *POLICY, f"policy.cache_view={view}", f"repeat={r}"]
            out.append((view, r, load_config(Path(BASE), sets)))
    return out


def run_row(view: str, repeat: int, run_dir: Path) -> tuple[dict[str, Any], pl.DataFrame]:
    """One run's summary row and its request rows (labelled for `paired_compare`)."""
    reqs = pl.DataFrame(list(read_jsonl(run_dir / "requests.jsonl")), infer_schema_length=None)
    samples = pl.DataFrame(list(read_jsonl(run_dir / "instances.jsonl")), infer_schema_length=None)
    served = engine_host_tokens(samples.with_columns(pl.lit(run_dir.name).alias("run_id")))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    load = manifest.get("backend_info", {}).get("host_load", {}).get("replay", {})
    ok = reqs.filter(pl.col("error").is_null())
    # Per request, the view's whole expectation (HBM, then host) against the engine's cached
    # tokens (HBM hit plus tier loads): tokens expected and not served, served and not expected.
    gap = (
        ok["predicted_cached_tokens"].fill_null(0)
        + ok["predicted_host_tokens"].fill_null(0)
        - ok["cached_tokens"].fill_null(0)
    )
    row = {
        "view": view,
        "repeat": repeat,
        "run_id": run_dir.name,
        "started_at": manifest.get("started_at"),
        "requests": reqs.height,
        "errors": reqs.height - ok.height,
        "input_tokens": int(reqs["input_tokens"].sum()),
        "cached_tokens": int(reqs["cached_tokens"].fill_null(0).sum()),
        "engine_host_tokens": served.get(run_dir.name, 0.0),
        "predicted_host_tokens": int(reqs["predicted_host_tokens"].fill_null(0).sum()),
        "expected_not_served": int(gap.clip(lower_bound=0).sum()),
        "served_not_expected": int((-gap).clip(lower_bound=0).sum()),
        "requests_expected_exactly": int((gap == 0).sum()),
        "ttft_p50_s": float(ok["ttft_s"].quantile(0.5) or 0.0),
        "ttft_p90_s": float(ok["ttft_s"].quantile(0.9) or 0.0),
        "e2e_p90_s": float(ok["e2e_s"].quantile(0.9) or 0.0),
        "load1": load.get("load1"),
    }
    instances = json.loads((run_dir / "config.json").read_text())["fleet"]["instances"]
    labelled = reqs.with_columns(
        pl.lit(view).alias("variant"),
        pl.lit(repeat).alias("repeat"),
        pl.lit(instances).alias("instances"),
    )
    return row, labelled


def host_expectation(mine: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs' rows (`engine_host_tokens`, `predicted_host_tokens`, `input_tokens`): the host
    tokens a view expected over those the engines' host tiers served, all runs together and its
    range over runs, and the host tier's share of prompt tokens (tier_view_sim reads the same)."""
    served = sum(r["engine_host_tokens"] for r in mine)
    expected = sum(r["predicted_host_tokens"] for r in mine)
    shares = [
        r["predicted_host_tokens"] / r["engine_host_tokens"]
        for r in mine
        if r["engine_host_tokens"]
    ]
    return {
        "runs": len(mine),
        "engine_host_share": served / max(sum(r["input_tokens"] for r in mine), 1),
        "expected_over_served": expected / served if served else None,
        "expected_over_served_min": min(shares) if shares else None,
        "expected_over_served_max": max(shares) if shares else None,
    }


def summarise(rows: list[dict[str, Any]], frames: list[pl.DataFrame]) -> dict[str, Any]:
    per_view = {}
    for view in VIEWS:
        mine = [r for r in rows if r["view"] == view]
        per_view[view] = {
            **host_expectation(mine),
            "expected_not_served": sum(r["expected_not_served"] for r in mine),
            "served_not_expected": sum(r["served_not_expected"] for r in mine),
            "cached_tokens": sum(r["cached_tokens"] for r in mine),
            "requests_expected_exactly": sum(r["requests_expected_exactly"] for r in mine),
            "requests": sum(r["requests"] for r in mine),
        }
    cols = ["request_id", "ttft_s", "tpot_s", "e2e_s", "input_tokens", "cached_tokens"]
    cols += ["prefill_instance", "error", "variant", "repeat", "instances"]
    frame = pl.concat([f.select(cols) for f in frames], how="vertical_relaxed")
    paired = {}
    for m in ("ttft_p50", "ttft_p90", "e2e_p90"):
        r = paired_compare(frame, "exact", "estimated", m, pair_on=("repeat",))
        spreads = [repeat_spread([x[f"{m}_s"] for x in rows if x["view"] == v]) for v in VIEWS]
        # A real-engine difference counts only beyond the repeats' own spread (the study's rule).
        paired[m] = {**r.to_row(), "spreads": spreads, "beyond_spread": beyond_spread(r, *spreads)}
    return {"per_view": per_view, "estimated_vs_exact": paired}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--results", type=Path, default=None, help="keep the run directories here")
    args = ap.parse_args()
    results = args.results or Path(tempfile.mkdtemp(prefix="akvc_tier_view_real_"))
    start = facts_at_start()
    plan = configs(args.repeats)
    rows, frames = [], []
    with contextlib.ExitStack() as stack:
        stack.enter_context(shared_fleets(keep=fleets_launched([c for _v, _r, c in plan])))
        for i, (view, repeat, cfg) in enumerate(plan):
            print(f"[{i + 1}/{len(plan)}] {view} repeat {repeat}", flush=True)
            row, reqs = run_row(view, repeat, execute(cfg, results, log=print))
            rows.append(row)
            frames.append(reqs)
            print(json.dumps(row), flush=True)
    out = {
        **run_facts("tier_view_real", args, start),
        "base": BASE,
        "sets": [*HOST, *POLICY],
        "results": str(results),
        "runs": rows,
        **summarise(rows, frames),
    }
    atomic_write_json(args.out, out)
    print(json.dumps({k: out[k] for k in ("per_view", "estimated_vs_exact")}, indent=1))


if __name__ == "__main__":
    main()
