"""What a new process pays before it works: imports and a real vLLM fleet's start, with and
without Python's compiled-module cache.

Every pipeline job, notebook, test module and engine is a new Python process. Where
PYTHONDONTWRITEBYTECODE is set (some container images set it; this sandbox does) and the
virtual environment was installed without bytecode, each of them compiles every module it
imports from source again, and a vLLM CPU engine is three such processes (API server, engine
core, worker). `make env` now compiles site-packages at install and make's recipes unset the
variable (Makefile); this script measures what that buys, on this machine, as interleaved
pairs:

- `cached`: the environment as installed (the variable unset, so modules compiled once are read
  back, and what is not yet compiled is written on first import);
- `uncached`: PYTHONPYCACHEPREFIX pointing to an empty folder and PYTHONDONTWRITEBYTECODE=1,
  so no process finds or writes a compiled module (the state before, for every package).

Targets: the imports that start a vLLM API server, a notebook run (papermill and the kernel),
a Snakemake process, the claims registry (jsonschema) and the `akvc` CLI; and, unless
`--no-fleet`, a two-instance vLLM CPU fleet of the tiny model from launch to healthy (the
fixture of the real-engine test modules). Each round runs every target once in each mode, the
mode order alternating by round, so a burst of load on the shared cores falls on both.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/process_startup.py \\
        --out results/bench/process_startup.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentic_kvc.io import atomic_write_json
from agentic_kvc.runs import hardware_info

REPO = Path(__file__).resolve().parents[1]
PY = str(REPO / ".venv" / "bin" / "python")

IMPORTS = {
    "vllm_api_server": "import vllm.entrypoints.openai.api_server",
    "notebook_run": "import papermill, ipykernel.kernelapp",
    "snakemake": "import snakemake.cli",
    "claims_registry": "import agentic_kvc.artifact.registry",
    "akvc_cli": "import sys; sys.argv = ['akvc', '--help']; "
    "from agentic_kvc.cli import main; main()",
}
FLEET = """
import sys, tempfile, time
from pathlib import Path
from agentic_kvc.config import FleetConfig
from agentic_kvc.serve.launcher import VllmFleet
t0 = time.monotonic()
cfg = FleetConfig(instances=2, model=sys.argv[1], block_size=32, max_num_seqs=32)
with VllmFleet.from_config(cfg, Path(tempfile.mkdtemp()), device="cpu",
                           startup_timeout_s=900) as fleet:
    print("READY", time.monotonic() - t0, flush=True)
"""
MODES = ("cached", "uncached")


def mode_env(mode: str, empty_prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    if mode == "uncached":
        env["PYTHONPYCACHEPREFIX"] = empty_prefix
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_once(target: str, mode: str, empty_prefix: str, model: str) -> float:
    """Wall seconds of one process (imports), or from launch to healthy (the fleet)."""
    env = mode_env(mode, empty_prefix)
    if target == "vllm_fleet":
        proc = subprocess.run(
            [PY, "-c", FLEET, model], cwd=REPO, env=env, capture_output=True, text=True
        )
        ready = [line for line in proc.stdout.splitlines() if line.startswith("READY")]
        if proc.returncode != 0 or not ready:
            raise RuntimeError(f"vllm_fleet ({mode}) did not start:\n{proc.stderr[-3000:]}")
        return float(ready[0].split()[1])
    t0 = time.perf_counter()
    proc = subprocess.run(
        [PY, "-c", IMPORTS[target]], cwd=REPO, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{target} ({mode}) failed:\n{proc.stderr[-3000:]}")
    return wall


def summarise(times: dict[str, list[float]]) -> dict[str, Any]:
    ratios = [u / c for c, u in zip(times["cached"], times["uncached"], strict=True)]
    saved = [u - c for c, u in zip(times["cached"], times["uncached"], strict=True)]
    return {
        **{f"{m}_s": times[m] for m in MODES},
        **{f"{m}_median_s": statistics.median(times[m]) for m in MODES},
        "saved_median_s": statistics.median(saved),
        "uncached_over_cached_median": statistics.median(ratios),
        "uncached_over_cached_range": [min(ratios), max(ratios)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/process_startup.json"))
    ap.add_argument("--rounds", type=int, default=3, help="interleaved pairs per target")
    ap.add_argument("--no-fleet", action="store_true", help="imports only (no vLLM engines)")
    ap.add_argument("--model", default=str(REPO / "models" / "tiny-qwen2"))
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    targets = list(IMPORTS) + ([] if args.no_fleet else ["vllm_fleet"])
    if "vllm_fleet" in targets and not Path(args.model, "config.json").is_file():
        ap.error(f"--model {args.model}: no config.json there (make model builds it)")
    times = {t: {m: [] for m in MODES} for t in targets}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="akvc-empty-pycache-") as empty:
        for t in IMPORTS:  # compile what `cached` may still lack, once, untimed
            run_once(t, "cached", empty, args.model)
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for t in targets:
                for mode in order:
                    loads.append(os.getloadavg()[0])
                    times[t][mode].append(run_once(t, mode, empty, args.model))
                    print(f"round {r} {t:16s} {mode:8s} {times[t][mode][-1]:7.2f} s", flush=True)
    out = {
        "benchmark": "process_startup",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": hardware_info(),
        "parameters": {
            "rounds": args.rounds,
            "modes": {
                "cached": "the environment as installed; PYTHONDONTWRITEBYTECODE unset",
                "uncached": "PYTHONPYCACHEPREFIX=<empty folder>, PYTHONDONTWRITEBYTECODE=1",
            },
            "imports": IMPORTS,
            "fleet": None
            if args.no_fleet
            else "2 x vLLM CPU, tiny model, launch to healthy (VllmFleet.from_config)",
        },
        "load1_range": [min(loads), max(loads)],
        "results": {t: summarise(times[t]) for t in targets},
    }
    atomic_write_json(args.out, out)
    for t, s in out["results"].items():
        print(
            f"{t:16s} cached {s['cached_median_s']:6.2f} s, uncached "
            f"{s['uncached_median_s']:6.2f} s (x{s['uncached_over_cached_median']:.2f})"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
