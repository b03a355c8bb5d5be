"""Real-engine check of the simulator (issue 16, item 5): inside the real engine's own spread.

A small token-scaled agentic workload (60 closed-loop sessions of the agentic-coding preset: the
serving calibration's workload, calibrate/serving_fit.py, under a seed the calibration never saw: 11
by default, 12 is refused) runs with `akvc run`'s backends on 1 and on 2 real tiny-model vLLM
CPU instances, `--repeats` times each (config field `repeat`: distinct runs of one config), and
once in the simulator with the cpu-tiny profile. Two instances use consistent_hash routing so
both backends place every session alike.

The check (the *envelope*), per fleet size and metric (TTFT and E2E p50/p90):
- the simulated value lies inside the real repeats' range (min..max);
- for 1 instance, also within 15% of the real repeats' mean;
- prefix-hit tokens: the simulator's equal vLLM's own counters (`prefix_cache_hits_total`) in
  every repeat (exact).
Reported beside each metric: the simulator's error to the real mean, the real engine's own
spread ((max - min) / mean), how often a model with no error would pass (analysis/envelope.py:
with 5 noisy repeats even an exact model misses some checks), and each real run's machine load
(its manifest's `host_load`). The session's verdict against that model (`against_perfect_model`):
at least as many checks in the envelope as a model with no error passes in 95% of sessions.

    flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock .venv/bin/python \
        benchmarks/sim_vs_vllm.py --repeats 5 --out results/bench/sim_vs_vllm.json

`--calibrate-interleaved` (CPU) also makes the profile it checks, under the same host load: per
round k, for each fleet size, one calibration replay (seed 12, calibrate/serving_fit.py) then one
check run (the validation seed), `--repeats` rounds. The serving stage is then fitted on the
calibration replays only (the check runs stay held out) over the package's step probes, and
the check simulates with that profile. On a shared host a profile fitted at another hour
carries that hour's neighbours into the check (docs/sim_profiles.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.envelope import (
    MEAN_TOLERANCE_1_INSTANCE,
    against_perfect_model,
    envelope,
    perfect_model_passes,
)
from agentic_kvc.calibrate.serving_fit import (
    SERVING_SEED,
    fit_and_store,
    mean_background,
    quantiles,
    serving_config,
    serving_sizes,
)
from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.profiles import CPU_TINY_FILE, load_cpu_profile
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.runs import execute, hardware_info, timing_conditions
from agentic_kvc.serve.neighbours import busy_neighbours
from agentic_kvc.sim.run_backend import profile_for, run_sim

VALIDATION_SEED = 11


def config_for(
    instances: int,
    backend: str,
    seed: int = VALIDATION_SEED,
    repeat: int = 0,
    overrides: Sequence[str] = (),
) -> RunConfig:
    """The serving calibration's workload and fleet (calibrate/serving_fit.py) under another seed,
    plus `--set` overrides (another model and hardware on a GPU host)."""
    cfg = serving_config(instances, backend, seed, repeat).canonical()
    return load_config(cfg, list(overrides)) if overrides else RunConfig.model_validate(cfg)


def engine_hits(run_dir: Path) -> float | None:
    """Prefix-hit tokens by vLLM's own counters: per instance, last minus first sample."""
    by_inst: dict[int, list[float]] = {}
    for row in read_jsonl(run_dir / "instances.jsonl"):
        if row.get("prefix_cache_hits") is not None:
            by_inst.setdefault(row["instance"], []).append(row["prefix_cache_hits"])
    if not by_inst:
        return None
    return sum(max(v) - min(v) for v in by_inst.values())


def host_load(run_dir: Path) -> dict[str, Any] | None:
    """The replay window's machine load from a real run's manifest (serve/hostload.py)."""
    info = json.loads((run_dir / "manifest.json").read_text()).get("backend_info") or {}
    load = info.get("host_load")
    if not load:
        return None
    window = load.get("replay") or load["run"]
    shares = window.get("shares") or {}
    return {
        "load1_mean": (window.get("load1") or {}).get("mean"),
        "load1_max": (window.get("load1") or {}).get("max"),
        "steal_mean": (shares.get("steal") or {}).get("mean"),
        "steal_max": (shares.get("steal") or {}).get("max"),
        "busy": (window.get("overall") or {}).get("busy"),
        # Busy cores outside the run's own process tree (neighbours, steal): recorded since
        # 2026-11-25 (serve/hostload.py).
        "others_cores": (window.get("cores") or {}).get("others_cores"),
        "own_cores": (window.get("cores") or {}).get("own_cores"),
        "others_runnable": (window.get("others_runnable") or {}).get("mean"),
        "loadavg_start": (load.get("loadavg_start") or {}).get("load1"),
    }


def sim_profile(config: RunConfig, profile_file: Path | None) -> EngineProfile:
    """The profile the config names, or a calibrated CPU profile file (`akvc calibrate --out`)
    for this fleet size: to check a fresh calibration before it replaces the package's."""
    if profile_file is None:
        return profile_for(config)
    return load_cpu_profile(profile_file, instances=config.fleet.instances)


def run_stats(run_dir: Path) -> dict[str, Any]:
    rows = list(read_jsonl(run_dir / "requests.jsonl"))
    ok = [r for r in rows if not r.get("error") and r.get("e2e_s") is not None]
    out: dict[str, Any] = {
        "run_dir": str(run_dir),
        "requests": len(rows),
        "errors": len(rows) - len(ok),
        "cached_tokens_records": sum(r.get("cached_tokens") or 0 for r in ok),
        "input_tokens": sum(r["input_tokens"] for r in ok),
        "output_tokens": sum(r.get("output_tokens") or 0 for r in ok),
        **quantiles(ok),
    }
    first = min(r["arrival_s"] for r in ok)
    out["makespan_s"] = max(r["arrival_s"] + r["e2e_s"] for r in ok) - first
    return out


def compare(
    instances: int,
    results: Path,
    repeats: int,
    seed: int,
    log: Any,
    tolerance: float | None = None,
    both: Sequence[str] = (),
    real_only: Sequence[str] = (),
    profile_file: Path | None = None,
    neighbours: int = 0,
) -> dict[str, Any]:
    """The simulator against `repeats` real runs of the same config (each beside
    `neighbours` spinning processes)."""
    reals = []
    for k in range(repeats):
        t0 = time.monotonic()
        # Real runs are kept under `results` (a rerun reuses complete ones): repeat k is its
        # own run_id.
        cfg = config_for(instances, "vllm", seed, k, [*both, *real_only])
        with busy_neighbours(neighbours):
            run_dir = execute(cfg, results, log=log)
        stats = {**run_stats(run_dir), "wall_s": round(time.monotonic() - t0, 2)}
        stats["prefix_hits_vllm_counters"] = engine_hits(run_dir)
        stats["host_load"] = host_load(run_dir)
        reals.append(stats)
    # Simulated runs are redone every time: the profile, which the run_id does not hash, may
    # have been recalibrated.
    root = Path(tempfile.mkdtemp(prefix="akvc-sim-"))
    t0 = time.monotonic()
    sim_cfg = config_for(instances, "sim", seed, 0, both)
    profile = sim_profile(sim_cfg, profile_file)
    # On the real repeats' mean background (runnable threads of other processes), when every one
    # recorded it; only a profile with a background term reads it (calibrate/serving_fit.py).
    background = mean_background([(r["host_load"] or {}).get("others_runnable") for r in reals])
    sim_cfg = sim_cfg.model_copy(
        update={"sim": sim_cfg.sim.model_copy(update={"host_neighbour_threads": background})}
    )
    run_dir = execute(sim_cfg, root, backend=lambda c, d: run_sim(c, d, profile), log=log)
    sim = {**run_stats(run_dir), "profile": profile.source, "background_threads": background}
    sim["wall_s"] = round(time.monotonic() - t0, 2)
    shutil.rmtree(root)
    metrics = envelope(sim, reals, tolerance)
    counters = [r["prefix_hits_vllm_counters"] for r in reals]
    hits = {
        "vllm_counters": counters,
        "vllm_records": [r["cached_tokens_records"] for r in reals],
        "sim_records": sim["cached_tokens_records"],
        "exact": all(c == sim["cached_tokens_records"] for c in counters),
    }
    return {
        "instances": instances,
        "policy": config_for(instances, "sim", seed, 0, both).policy.name,
        "vllm_runs": reals,
        "sim": sim,
        "metrics": metrics,
        "mean_tolerance": tolerance,
        "prefix_hits": hits,
        "envelope_pass": all(m["pass"] for m in metrics.values()),
        "max_abs_rel_error": max(abs(m["sim_rel_error"]) for m in metrics.values()),
        # How often a model with no error would pass this envelope (analysis/envelope.py).
        "perfect_model": perfect_model_passes(reals, tolerance),
    }


def interleaved_plan(
    instances: Sequence[int], repeats: int, calibration_sizes: Sequence[int]
) -> list[tuple[str, int, int]]:
    """(role, fleet size, repeat) in run order: per round, per size, calibration then check."""
    return [
        (role, n, k)
        for k in range(repeats)
        for n in sorted({*instances, *calibration_sizes})
        for role, sizes in (("calibration", calibration_sizes), ("check", instances))
        if n in sizes
    ]


def calibrate_interleaved(
    instances: Sequence[int],
    repeats: int,
    calibration_sizes: Sequence[int],
    seed: int,
    run: Callable[[RunConfig, str], Path],
    fit: Callable[[list[Path]], dict[str, Any]],
) -> dict[str, Any]:
    """Run the interleaved plan (`run(config, role)` returns the run directory), then `fit`
    the serving stage on the calibration replays alone: the check runs are never shown to it."""
    order = []
    for role, n, k in interleaved_plan(instances, repeats, calibration_sizes):
        cfg = (
            serving_config(n, repeat=k) if role == "calibration" else config_for(n, "vllm", seed, k)
        )
        t0 = time.monotonic()
        run_dir = run(cfg, role)
        order.append(
            {
                "role": role,
                "instances": n,
                "repeat": k,
                "seed": cfg.seed,
                "run_dir": str(run_dir),
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "wall_s": round(time.monotonic() - t0, 2),
                "host_load": host_load(run_dir),
            }
        )
    calibration = [Path(r["run_dir"]) for r in order if r["role"] == "calibration"]
    return {"order": order, "fit": fit(calibration), "load1_mean": load_summary(order)}


def load_summary(order: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float | None]]]:
    """Per role and fleet size, each run's mean load1 during its replay (run order)."""
    out: dict[str, dict[str, list[float | None]]] = {}
    for r in order:
        load = (r["host_load"] or {}).get("load1_mean")
        out.setdefault(r["role"], {}).setdefault(str(r["instances"]), []).append(load)
    return out


def perfect_model_of(case: dict[str, Any]) -> dict[str, Any]:
    """A case's perfect-model pass rates: stored, or (older files) computed from its runs."""
    return case.get("perfect_model") or perfect_model_passes(
        case["vllm_runs"], case.get("mean_tolerance")
    )


def table(cases: list[dict[str, Any]], calibration_load: dict[str, list[Any]] | None = None) -> str:
    """The envelope as a Markdown table (what docs/sim_profiles.md quotes), then each real
    run's mean load1 (and the calibration replays', when calibrated alongside)."""
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    lines = [
        "| instances | metric | real mean | real min..max | real spread | simulator | error "
        "| inside range | in envelope | a perfect model passes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        perfect = perfect_model_of(c)
        for n, m in c["metrics"].items():
            name = n.removesuffix("_s").replace("_", " ").upper().replace(" P", " p")
            lines.append(
                f"| {c['instances']} | {name} | {m['real_mean'] * 1e3:.0f} ms "
                f"| {m['real_min'] * 1e3:.0f}..{m['real_max'] * 1e3:.0f} ms "
                f"| {m['real_spread_rel']:.1%} | {m['sim'] * 1e3:.0f} ms "
                f"| {m['sim_rel_error']:+.1%} | {yes(m['inside_range'])} | {yes(m['pass'])} "
                f"| {perfect['per_metric'][n]:.0%} |"
            )
    bar = against_perfect_model(cases)
    perfect = bar["perfect_model"]
    lines += [
        "",
        f"In the envelope: the simulator {bar['passed']} of {bar['checks']}; a model with no "
        f"error {perfect['expected']:.1f} on average, at least {perfect['p05']:.0f} in 95% of "
        f"sessions, all {bar['checks']} with probability {perfect['all']:.0%} (the repeats' own "
        f"scatter, analysis/envelope.py): {'met' if bar['met'] else 'not met'}.",
    ]
    fmt = lambda xs: ", ".join("?" if x is None else f"{x:.2f}" for x in xs)  # noqa: E731
    lines += [
        "",
        "| instances | check runs' load1 | their runnable threads of other processes "
        "| simulated on | calibration replays' load1 |",
        "|---|---|---|---|---|",
    ]
    for c in cases:
        checks = [(r["host_load"] or {}).get("load1_mean") for r in c["vllm_runs"]]
        others = [(r["host_load"] or {}).get("others_runnable") for r in c["vllm_runs"]]
        cal = (calibration_load or {}).get(str(c["instances"]))
        on = (c.get("sim") or {}).get("background_threads", 0.0)
        lines.append(
            f"| {c['instances']} | {fmt(checks)} | {fmt(others)} | {on:.2f} "
            f"| {fmt(cal) if cal else '-'} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/sim_vs_vllm.json"))
    ap.add_argument(
        "--results",
        type=Path,
        # Not results/ itself: the pipeline's analysis reads every run under results/runs/.
        default=Path("results/sim_vs_vllm"),
        help="results root of the real runs (kept; a rerun reuses complete ones)",
    )
    ap.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="real runs per fleet size; the simulator must fall inside their range",
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=VALIDATION_SEED,
        help=(
            "workload seed; must differ from the serving calibration's "
            "(calibrate/serving_fit.py: 12)"
        ),
    )
    ap.add_argument(
        "--mean-tolerance",
        type=float,
        default=MEAN_TOLERANCE_1_INSTANCE,
        help="the simulator must also lie within this of the real mean (relative)...",
    )
    ap.add_argument(
        "--mean-tolerance-instances",
        type=int,
        nargs="+",
        default=[1],
        help="... for these fleet sizes (on 2 CPU cores only 1 instance has a spare core)",
    )
    ap.add_argument(
        "--set",
        dest="both",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the real and the simulated runs (e.g. fleet.hardware=h100)",
    )
    ap.add_argument(
        "--real-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for the real runs only (e.g. fleet.model=<hub id> of the sim's model)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="simulate with this calibrated cpu-tiny profile file instead of the package's",
    )
    ap.add_argument(
        "--calibrate-interleaved",
        action="store_true",
        help="fit the serving stage first, on calibration replays (seed 12) interleaved with the "
        "check runs (calibration, check per size and round; --results/calibration), over the "
        "step probes of --profile or the package's; simulate with that fit (CPU only)",
    )
    ap.add_argument(
        "--neighbours",
        type=int,
        default=0,
        help="run each real run beside this many processes spinning a core each, outside the "
        "run's process tree (serve/neighbours.py): a known neighbour load. Use a --results root "
        "of its own (real runs are reused by run id, which does not see this)",
    )
    args = ap.parse_args()
    if args.neighbours < 0:
        ap.error("--neighbours must be >= 0")
    if args.neighbours and args.calibrate_interleaved:
        ap.error("--neighbours: calibrate beside neighbours with sim_vs_vllm_neighbours.py")
    if args.seed == SERVING_SEED:
        ap.error(f"seed {SERVING_SEED} is the serving calibration workload's: pick another")
    if args.repeats < 2:
        ap.error("--repeats must be at least 2: the envelope is the repeats' range")
    if args.calibrate_interleaved and (args.both or args.real_set):
        ap.error("--calibrate-interleaved fits the cpu-tiny profile: no --set/--real-set")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    interleaved = None
    if args.calibrate_interleaved:
        args.profile, interleaved = interleaved_profile(args, log)
    # The profile the simulated runs use (of their smallest fleet: CPU profiles vary with it).
    prof = sim_profile(
        config_for(min(args.instances), "sim", args.seed, 0, args.both), args.profile
    )
    cases = []
    for n in args.instances:
        tolerance = args.mean_tolerance if n in args.mean_tolerance_instances else None
        case = compare(
            n,
            args.results,
            args.repeats,
            args.seed,
            log,
            tolerance,
            args.both,
            args.real_set,
            args.profile,
            args.neighbours,
        )
        log(
            f"{n} instance(s): "
            + ", ".join(
                f"{k} {m['sim_rel_error']:+.1%} (spread {m['real_spread_rel']:.1%}"
                f"{', ok' if m['pass'] else ', OUT'})"
                for k, m in case["metrics"].items()
            )
            + f"; hits sim {case['prefix_hits']['sim_records']} vs vLLM "
            f"{case['prefix_hits']['vllm_counters']}"
        )
        cases.append(case)
    doc = {
        "benchmark": "sim_vs_vllm",
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "started_at": started,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**hardware_info(), **timing_conditions()},
        "profile": {
            "source": prof.source,
            "coefficients": getattr(prof.cost, "as_dict", lambda: {})(),
            "kv_capacity_tokens": prof.kv_capacity_tokens,
        },
        "config": config_for(1, "vllm", args.seed, 0, [*args.both, *args.real_set]).canonical()
        | {"instances": list(args.instances), "repeats": args.repeats},
        "overrides": {"both": args.both, "real_only": args.real_set},
        "neighbours": args.neighbours,
        "goal": {
            "envelope": "simulated TTFT/E2E p50/p90 inside the real repeats' min..max",
            "mean_tolerance": args.mean_tolerance,
            "mean_tolerance_instances": args.mean_tolerance_instances,
            "prefix_hits": "exact (simulated cached tokens == vLLM's prefix_cache_hits_total)",
        },
        "cases": cases,
        "envelope_pass": all(c["envelope_pass"] for c in cases),
        # The verdict a model with no error gets in 95% of sessions (analysis/envelope.py).
        "against_perfect_model": against_perfect_model(cases),
        "prefix_hits_exact": all(c["prefix_hits"]["exact"] for c in cases),
        "calibrate_interleaved": interleaved,
        "table_md": table(cases, interleaved and interleaved["load1_mean"].get("calibration")),
    }
    atomic_write_json(args.out, doc)
    print(doc["table_md"])
    print(args.out)


def interleaved_profile(
    args: argparse.Namespace, log: Callable[[str], None]
) -> tuple[Path, dict[str, Any]]:
    """`--calibrate-interleaved`: the real runs, then the profile fitted on the calibration
    replays (a copy of the probes' profile with its serving stage refitted)."""
    from agentic_kvc.serve.device import allowed_cores

    cores = len(allowed_cores())
    fitted = args.results / "cpu-tiny-fitted.json"
    fitted.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.profile or CPU_TINY_FILE, fitted)
    roots = {"calibration": args.results / "calibration", "check": args.results}
    result = calibrate_interleaved(
        args.instances,
        args.repeats,
        serving_sizes(cores),  # as `akvc calibrate --serving`
        args.seed,
        lambda cfg, role: execute(cfg, roots[role], log=log),
        lambda dirs: fit_and_store(fitted, dirs, cores, log),
    )
    return fitted, {"profile": str(fitted), **result}


if __name__ == "__main__":
    main()
