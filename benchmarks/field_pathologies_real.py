"""The shared-system-prompt collapse on real vLLM CPU engines, beside the simulator's runs of the
same configs (pre-registered: docs/policies.md, "The collapse on real engines").

The real study's fleet (config/runs/real_cpu_study.yaml: two tiny-model vLLM CPU engines behind
the proxy, token scale 0.1) replays benchmarks/field_pathologies.py's `collapse_chat` workload
(a shared system prompt ahead of short chat sessions) under sglang_cache_aware and
predicted_ttft (given the cpu-tiny profile, as the real study gives it), per workload seed, the
two policies' runs of a seed back to back in alternating order on one fleet kept between runs
(prefix caches reset), each run's machine load recorded; then the same configs on the
simulator. Per run the busiest engine's share of requests; paired per backend over seeds
(agentic_kvc.paired): TTFT p50 / p90, E2E p90, hit rate.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/field_pathologies_real.py \\
        --out results/bench/field_pathologies_real.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.paired import paired_compare, request_frame
from agentic_kvc.runs import execute, hardware_info
from agentic_kvc.serve.run_backend import shared_fleets

REPO = Path(__file__).resolve().parents[1]
BASE = "config/runs/real_cpu_study.yaml"
GP = "workload.generator.params"
# benchmarks/field_pathologies.py's collapse_chat, on the real study's fleet and token scale
WORKLOAD = [
    "workload.generator.preset=chat",
    f"{GP}.system_prompt_tokens=4000",
    f"{GP}.session_rate_per_s=2.0",
]
# The real study's predicted_ttft (config/config.yaml, real_cpu): the cpu-tiny profile.
POLICIES = {
    "sglang_cache_aware": ["policy.name=sglang_cache_aware"],
    "predicted_ttft": [
        'policy={"name": "predicted_ttft", "params": {"hardware": "cpu-tiny", "model": "tiny", '
        '"max_num_batched_tokens": 8192, "cost_model": "profile"}}'
    ],
}
OURS = "predicted_ttft"
METRICS = ("ttft_p50", "ttft_p90", "e2e_p90", "hit_rate")


def busiest_share(rows: list[dict[str, Any]]) -> float:
    """The busiest instance's share of a run's error-free requests."""
    ok = [r["prefill_instance"] for r in rows if not r.get("error")]
    return max(Counter(ok).values()) / len(ok) if ok else 0.0


def run_backend(backend: str, seeds: list[int], results: Path) -> dict[str, Any]:
    """Every policy on every seed on `backend` ("vllm" or "sim"): the runs and the pairs."""
    runs, frames = [], []
    with shared_fleets(keep=1):
        for seed in seeds:
            order = list(POLICIES) if seed % 2 == 0 else list(POLICIES)[::-1]
            for policy in order:
                sets = [f"backend={backend}", f"seed={seed}", *WORKLOAD, *POLICIES[policy]]
                config = load_config(REPO / BASE, sets)
                t0 = time.monotonic()
                run_dir = execute(config, results)
                rows = list(read_jsonl(run_dir / "requests.jsonl"))
                manifest = json.loads((run_dir / "manifest.json").read_text())
                load = manifest.get("backend_info", {}).get("host_load", {})
                info = {
                    "backend": backend,
                    "policy": policy,
                    "seed": seed,
                    "run_id": run_dir.name,
                    "wall_s": round(time.monotonic() - t0, 1),
                    "load1_replay": load.get("replay", {}).get("load1"),
                    "requests": len(rows),
                    "errors": sum(1 for r in rows if r.get("error")),
                    "busiest_request_share": busiest_share(rows),
                }
                runs.append(info)
                print(json.dumps(info), flush=True)
                frames.append(
                    request_frame(rows).with_columns(
                        pl.lit(policy).alias("policy"),
                        pl.lit(seed).alias("seed"),
                        pl.lit(config.fleet.instances).alias("instances"),
                    )
                )
    frame = pl.concat(frames)
    paired = {
        m: paired_compare(frame, OURS, "sglang_cache_aware", m, by="policy").to_row()
        for m in METRICS
    }
    return {"runs": runs, "sglang_cache_aware_vs_ours": paired}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/field_pathologies_real.json"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--results", type=Path, default=None, help="run folders (default: a temp dir)")
    ap.add_argument("--sim-only", action="store_true", help="the simulator's runs alone")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="akvc_fp_real_") as tmp:
        results = args.results or Path(tmp)
        out: dict[str, Any] = {}
        for backend in ("sim",) if args.sim_only else ("vllm", "sim"):
            out[backend] = run_backend(backend, seeds, results)
    doc = {
        "benchmark": "field_pathologies_real",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "wall_s": round(time.time() - t0, 1),
        "machine": hardware_info(),
        "parameters": {
            "base": BASE,
            "workload": WORKLOAD,
            "policies": POLICIES,
            "seeds": seeds,
            "registered": "docs/policies.md, 'The collapse on real engines'",
        },
        "backends": out,
    }
    atomic_write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
