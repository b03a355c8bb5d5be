"""Refit and recheck the simulator offline, on real runs already made (no engine started).

Each *session* is one sitting of `benchmarks/sim_vs_vllm.py --calibrate-interleaved` (or of
`akvc calibrate --serving` followed by a check): a folder of calibration replays (seed 12) and a
folder of check runs (another seed, 5 repeats per fleet size). For the simulator code and the
package's step probes as they are in this checkout, this script fits the serving stage
(sim/serving_fit.py) on

- each session's own calibration replays (`session`), and
- the calibration replays of the sessions named by `--pool`, together (`pooled`),

and judges each fit on every session's check runs with the benchmark's envelope (inside the
real repeats' min..max; within 15% of their mean on 1 instance). The check runs never reach a
fit. A model change is compared by running it at two commits (one simulation is ~0.1 s; a
fit ~60 s). `--compare BEFORE.json AFTER.json` then gives, per fit family and fleet size,
each one's bias (mean log error) and the paired change of |log error| with 95% intervals.

    .venv/bin/python benchmarks/sim_vs_vllm_offline.py \\
        --session s11=results/s11/calibration/runs:results/s11/runs \\
        --session s13=... --pool s11 s13 --out results/bench/sim_vs_vllm_offline.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_vs_vllm import MEAN_TOLERANCE_1_INSTANCE, envelope

from agentic_kvc.sim.profiles import CPU_TINY_FILE, load_cpu_profile
from agentic_kvc.sim.serving_fit import ServingRun, apply_fit, fit_serving


def parse_session(spec: str) -> tuple[str, Path, Path]:
    name, sep, dirs = spec.partition("=")
    cal, sep2, check = dirs.partition(":")
    if not (sep and sep2 and name):
        raise argparse.ArgumentTypeError(f"--session {spec!r}: want NAME=CALIBRATION_DIR:CHECK_DIR")
    for d in (Path(cal), Path(check)):
        if not d.is_dir():
            raise argparse.ArgumentTypeError(f"--session {spec!r}: {d} is not a directory")
    return name, Path(cal), Path(check)


def runs_in(folder: Path) -> list[ServingRun]:
    return [ServingRun(d) for d in sorted(folder.iterdir()) if (d / "config.json").is_file()]


def fit_params(fit: dict[str, Any]) -> dict[str, Any]:
    slow = fit["contended_slowdown"]
    return {"scale": fit["prefill_scale"], "contended": (slow["prefill"], slow["step"])}


def judge(
    base: Any, params: dict[str, Any], checks: list[ServingRun], host_cores: int
) -> dict[str, Any]:
    """The envelope of one fit on one session's check runs, per fleet size."""
    out: dict[str, Any] = {}
    for n in sorted({r.instances for r in checks}):
        runs = [r for r in checks if r.instances == n]
        contended = tuple(params["contended"]) if n >= host_cores else None
        sim = runs[0].simulate(apply_fit(base, params["scale"], contended))  # one config per size
        tol = MEAN_TOLERANCE_1_INSTANCE if n < host_cores else None
        out[str(n)] = envelope(sim, [r.real for r in runs], tol)
    metrics = [m for size in out.values() for m in size.values()]
    return {
        "params": params,
        "inside_range": sum(m["inside_range"] for m in metrics),
        "envelope": sum(m["pass"] for m in metrics),
        "checks": len(metrics),
        "cases": out,
    }


def log_errors(doc: dict[str, Any], fit: str, instances: str) -> dict[tuple[str, str], float]:
    """log(simulated / real mean) per (session, metric) of one fit family and fleet size."""
    return {
        (r["session"], m): math.log(v["sim"] / v["real_mean"])
        for r in doc["results"]
        if r["fit"].split("/")[0] == fit and instances in r["cases"]
        for m, v in r["cases"][instances].items()
    }


def _mean_interval(values: list[float], seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% bootstrap interval (10,000 resamples)."""
    x = np.asarray(values)
    boots = np.random.default_rng(seed).choice(x, (10_000, len(x))).mean(axis=1)
    return float(x.mean()), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Two outputs of this script (e.g. two commits) on the same sessions: per fit family and
    fleet size, each one's mean signed log error (bias) and the paired difference of |log error|
    (after - before) over the same checks, with 95% intervals."""
    out = []
    for fit in ("session", "pooled"):
        for n in ("1", "2"):
            a, b = log_errors(before, fit, n), log_errors(after, fit, n)
            keys = sorted(a.keys() & b.keys())
            if not keys:
                continue
            diff = [abs(b[k]) - abs(a[k]) for k in keys]
            out.append(
                {
                    "fit": fit,
                    "instances": int(n),
                    "checks": len(keys),
                    "bias_before": _mean_interval([a[k] for k in keys]),
                    "bias_after": _mean_interval([b[k] for k in keys]),
                    "abs_error_before": float(np.mean([abs(a[k]) for k in keys])),
                    "abs_error_after": float(np.mean([abs(b[k]) for k in keys])),
                    "abs_error_change": _mean_interval(diff),
                    "better": sum(d < 0 for d in diff),
                    "worse": sum(d > 0 for d in diff),
                }
            )
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--compare":
        return compare_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--session", type=parse_session, action="append", required=True, metavar="NAME=CAL:CHECK"
    )
    ap.add_argument("--pool", nargs="+", default=[], help="sessions whose replays fit together")
    ap.add_argument(
        "--host-cores",
        type=int,
        default=2,
        help="cores of the sessions' host: fleets this large share them (the contended cost)",
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    names = [s[0] for s in args.session]
    unknown = sorted(set(args.pool) - set(names))
    if unknown:
        ap.error(f"--pool names no --session: {', '.join(unknown)}")
    base = load_cpu_profile(CPU_TINY_FILE, serving_fit=False)
    calibration = {name: runs_in(cal) for name, cal, _ in args.session}
    checks = {name: runs_in(check) for name, _, check in args.session}
    fits = {
        f"session/{n}": {n: fit_params(fit_serving(base, calibration[n], args.host_cores))}
        for n in names
    }
    if args.pool:
        pooled = [r for n in args.pool for r in calibration[n]]
        params = fit_params(fit_serving(base, pooled, args.host_cores))
        fits["pooled"] = dict.fromkeys(names, params)
    results = []
    for fit_name, per in fits.items():
        for session, params in per.items():
            verdict = judge(base, params, checks[session], args.host_cores)
            results.append({"fit": fit_name, "session": session, **verdict})
            misses = [
                f"{n}i {m.removesuffix('_s')} {v['sim_rel_error']:+.0%}"
                for n, case in verdict["cases"].items()
                for m, v in case.items()
                if not v["pass"]
            ]
            print(
                f"{fit_name:14s} on {session}: inside "
                f"{verdict['inside_range']}/{verdict['checks']}, "
                f"envelope {verdict['envelope']}/{verdict['checks']}"
                + (f" (misses: {'; '.join(misses)})" if misses else ""),
                flush=True,
            )
    doc = {
        "benchmark": "sim_vs_vllm_offline",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "sessions": {n: {"calibration": str(c), "check": str(k)} for n, c, k in args.session},
        "pool": args.pool,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(args.out)


def _ci(m: tuple[float, float, float]) -> str:
    return f"{m[0]:+.3f} [{m[1]:+.3f}, {m[2]:+.3f}]"


def compare_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(
        prog="sim_vs_vllm_offline.py --compare", description=compare.__doc__
    )
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    if not rows:
        ap.error("the two files share no (session, fit, metric) check")
    for r in rows:
        b0, b1, d = (_ci(r[k]) for k in ("bias_before", "bias_after", "abs_error_change"))
        print(
            f"{r['fit']:8s} {r['instances']} instance(s), {r['checks']} checks: mean log error "
            f"{b0} -> {b1}; |log error| {r['abs_error_before']:.3f} -> "
            f"{r['abs_error_after']:.3f}, change {d} ({r['better']} better, {r['worse']} worse)"
        )
    if args.out:
        doc = {"before": str(args.before), "after": str(args.after), "rows": rows}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
