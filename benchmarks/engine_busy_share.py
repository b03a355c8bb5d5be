"""How busy a 2-instance fleet's engines were: real runs beside their simulated twins.

A run's `instances.jsonl` samples every engine every `sim.sample_interval_s` (real: the
engine's /metrics; simulated: the engine model), with `running` and `waiting` requests and
`kv_usage`. This reads every complete run under the given results roots (`runs/<id>/` and
archived `<id>/`) and reports per run: the share of sample times at which both instances were
running something, the share at which either was, the mean running and waiting requests per
instance, the mean KV usage and the largest preemption counter. Runs with another number of
instances are skipped.

Why: the cpu-tiny profile charges a slowdown for every step that overlaps another instance's
step (calibrate/serving_fit.py), and a twin that charges it where the engines do not slow down
settles in a busier regime than theirs; this table shows where (docs/sim_profiles.md, "A
quiet-machine calibration, beside the committed fit").

    .venv/bin/python benchmarks/engine_busy_share.py results results/archive \\
        --out results/bench/engine_busy_share.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def busy_share(samples_path: Path, instances: int = 2) -> dict[str, float] | None:
    """The run's busy statistics from its instance samples, or None when no sample time has
    all `instances`."""
    at: dict[float, dict[int, dict[str, Any]]] = defaultdict(dict)
    with samples_path.open() as f:
        for line in f:
            s = json.loads(line)
            at[s["t"]][s["instance"]] = s
    rows = [v for v in at.values() if len(v) == instances]
    if not rows:
        return None

    def get(s: dict[str, Any], key: str) -> float:
        return float(s.get(key) or 0)  # a sample before an engine's first scrape has nulls

    busy = [[get(v[i], "running") > 0 for i in range(instances)] for v in rows]
    running = [get(v[i], "running") for v in rows for i in range(instances)]
    return {
        "samples": len(rows),
        "all_busy": sum(all(b) for b in busy) / len(rows),
        "any_busy": sum(any(b) for b in busy) / len(rows),
        "running_per_instance": statistics.fmean(running),
        "waiting_per_instance": statistics.fmean(
            get(v[i], "waiting") for v in rows for i in range(instances)
        ),
        "kv_usage": statistics.fmean(get(v[i], "kv_usage") for v in rows for i in range(instances)),
        "preemptions_max": max(get(v[i], "preemptions") for v in rows for i in range(instances)),
    }


def run_dirs(root: Path) -> list[Path]:
    return sorted(
        d for d in [*root.glob("runs/*"), *root.glob("*")] if (d / "instances.jsonl").is_file()
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path, help="results folders to read")
    ap.add_argument("--instances", type=int, default=2, help="fleet size to keep (default 2)")
    ap.add_argument("--model", default="tiny", help="fleet.model to keep (default tiny)")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for root in args.roots:
        for d in run_dirs(root):
            try:
                cfg = json.loads((d / "config.json").read_text())
            except (OSError, json.JSONDecodeError):
                continue
            fleet = cfg.get("fleet", {})
            if fleet.get("model") != args.model or fleet.get("instances") != args.instances:
                continue
            stats = busy_share(d / "instances.jsonl", args.instances)
            if stats is None:
                continue
            rows.append(
                {
                    "run": str(d),
                    "backend": cfg.get("backend"),
                    "policy": cfg.get("policy", {}).get("name"),
                    "kv_cache_tokens": fleet.get("kv_cache_tokens"),
                    "host_gib": (fleet.get("kv_tiers") or {}).get("host_gib", 0),
                    **stats,
                }
            )
    for r in rows:
        print(
            f"{r['backend']:5} {r['policy'] or '-':20} kv {r['kv_cache_tokens'] or '-':>6} "
            f"host {r['host_gib']:<6} all busy {r['all_busy']:.2f} any {r['any_busy']:.2f} "
            f"running {r['running_per_instance']:.2f} waiting {r['waiting_per_instance']:.2f} "
            f"kv {r['kv_usage']:.2f} preemptions {r['preemptions_max']:.0f}  {r['run']}"
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
        doc = {"benchmark": "engine_busy_share", "command": " ".join(cmd), "results": rows}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
