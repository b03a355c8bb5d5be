"""Real runs of the fidelity check under a known neighbour load (issue 16, item 5).

On the shared host the real engine's latencies follow its neighbours' CPU use (sessions at a
mean load1 of 3.4-4.2 ran 20-40% slower than at 1.3-2.3; docs/sim_profiles.md). This driver
makes that load on purpose: per round, for each neighbour level (0, 1, 2... processes spinning a
core each, outside the run's process tree: serve/neighbours.py; the level order rotates by
round), for each fleet size, one calibration replay (seed 12, calibrate/serving_fit.py) and one
check run (the validation seed). Each level's runs land in their own results root,
`<results>/n<level>/calibration` and `<results>/n<level>/runs`, the layout of one session of
`benchmarks/sim_vs_vllm_offline.py`. Every run's manifest records the runnable threads outside
its process tree (`host_load.replay.others_runnable`), which is what the simulator's background
term is fitted on and driven by.

    flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock .venv/bin/python \\
        benchmarks/sim_vs_vllm_neighbours.py --levels 0 1 2 --rounds 4 --calibration-rounds 2 \\
        --seed 16 --results results/sim_vs_vllm_neighbours
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_vs_vllm import VALIDATION_SEED, config_for, host_load

from agentic_kvc.calibrate.serving_fit import SERVING_SEED, serving_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.runs import execute
from agentic_kvc.serve.neighbours import busy_neighbours


def plan(
    levels: list[int], sizes: list[int], rounds: int, calibration_rounds: int
) -> list[tuple[int, int, int, str]]:
    """(round, level, fleet size, role) in run order; levels rotate by round so no level
    always runs first (the host drifts within a sitting)."""
    out = []
    for k in range(rounds):
        shift = k % len(levels)
        for level in levels[shift:] + levels[:shift]:
            for n in sizes:
                if k < calibration_rounds:
                    out.append((k, level, n, "calibration"))
                out.append((k, level, n, "check"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[0, 1, 2], help="spinners per level")
    ap.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=4, help="check runs per level and size")
    ap.add_argument(
        "--calibration-rounds", type=int, default=2, help="calibration replays per level and size"
    )
    ap.add_argument("--seed", type=int, default=VALIDATION_SEED, help="the check runs' seed")
    ap.add_argument("--results", type=Path, default=Path("results/sim_vs_vllm_neighbours"))
    ap.add_argument("--out", type=Path, default=None, help="run log (default <results>/order.json)")
    args = ap.parse_args()
    if args.seed == SERVING_SEED:
        ap.error(f"seed {SERVING_SEED} is the serving calibration workload's: pick another")
    if any(level < 0 for level in args.levels):
        ap.error("--levels: spinner counts must be >= 0")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    order: list[dict[str, Any]] = []
    steps = plan(args.levels, args.instances, args.rounds, args.calibration_rounds)
    out = args.out or args.results / "order.json"
    for i, (k, level, n, role) in enumerate(steps, 1):
        cfg = (
            serving_config(n, repeat=k)
            if role == "calibration"
            else config_for(n, "vllm", args.seed, k)
        )
        root = args.results / f"n{level}" / ("calibration" if role == "calibration" else "")
        t0 = time.monotonic()
        with busy_neighbours(level):
            run_dir = execute(cfg, root, log=log)
        load = host_load(run_dir)
        order.append(
            {
                "round": k,
                "neighbours": level,
                "instances": n,
                "role": role,
                "seed": cfg.seed,
                "run_dir": str(run_dir),
                "wall_s": round(time.monotonic() - t0, 2),
                "host_load": load,
            }
        )
        log(
            f"[{i}/{len(steps)}] {role} n={n} neighbours={level}: "
            f"others {((load or {}).get('others_cores'))} cores, "
            f"{((load or {}).get('others_runnable'))} runnable; load1 "
            f"{((load or {}).get('load1_mean'))}"
        )
        atomic_write_json(out, {"command": " ".join(sys.argv), "order": order})
    print(out)


if __name__ == "__main__":
    main()
