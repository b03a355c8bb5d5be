"""Cache-view error on real vLLM CPU engines with a small KV cache (docs/instruments.md).

The real-engine workload of config/runs/real_cpu_small.yaml (two tiny-model instances, 24
token-scaled agentic sessions) runs per policy with the engines' default KV cache and with a
small one (`fleet.kv_cache_tokens`, i.e. `--num-gpu-blocks-override`), so that blocks are
evicted while sessions wait on tools. For each run: the router's estimated prediction for the
instance it chose against the engine-reported cached tokens of the request that ran there
(`instruments.cache_error.record_rows`), for later turns (the first turn of a session has
nothing to mispredict), and the machine's load during the run (manifest `host_load`). The
same config is simulated beside it (the simulator's own truth, `run_cache_error`).

    flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock .venv/bin/python \
        benchmarks/cache_view_real.py --out results/bench/cache_view_real.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from agentic_kvc.config import load_config
from agentic_kvc.instruments.cache_error import errors, record_rows, run_cache_error
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.runs import execute
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

BASE = "config/runs/real_cpu_small.yaml"


def later_turns(rows: list[dict[str, Any]], view: str) -> dict[str, Any]:
    errs = [
        e for r in rows if r["idle_gap_s"] is not None for e in errors(r, view, chosen_only=True)
    ]
    n = len(errs)
    return {
        "turns": n,
        "false_hit_share": sum(f > 0 for f, _m in errs) / n if n else None,
        "false_hit_tokens": sum(f for f, _m in errs) / n if n else None,
        "missed_hit_tokens": sum(m for _f, m in errs) / n if n else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--policies", default="lmetric,round_robin")
    ap.add_argument("--kv", default="0,4608", help="KV tokens per instance; 0 = engine default")
    ap.add_argument("--results", type=Path, default=None, help="keep the run directories here")
    args = ap.parse_args()
    results = args.results or Path(tempfile.mkdtemp(prefix="akvc_cache_view_real_"))
    out: list[dict[str, Any]] = []
    for kv in (int(x) for x in args.kv.split(",")):
        for policy in args.policies.split(","):
            sets = [f"policy.name={policy}"] + ([f"fleet.kv_cache_tokens={kv}"] if kv else [])
            config = load_config(BASE, sets)
            run_dir = execute(config, results)
            manifest = json.loads((run_dir / "manifest.json").read_text())
            real = record_rows(list(read_jsonl(run_dir / "requests.jsonl")))
            sim_cfg = load_config(BASE, [*sets, "backend=sim"])
            _rec, sim = run_cache_error(
                sim_cfg, load_workload(sim_cfg.workload, sim_cfg.seed), profile_for(sim_cfg)
            )
            load = manifest.get("backend_info", {}).get("host_load", {})
            out.append(
                {
                    "policy": policy,
                    "kv_cache_tokens": kv or None,
                    "run_id": run_dir.name,
                    "real": later_turns(real, "estimated"),
                    "sim_estimated": later_turns(sim, "estimated"),
                    "sim_exact": later_turns(sim, "exact"),
                    "host_load": load.get("replay", {}).get("load1"),
                }
            )
            print(json.dumps(out[-1]))
    atomic_write_json(args.out, {"base": BASE, "runs": out})


if __name__ == "__main__":
    main()
