"""Refit and recheck the simulator offline, on real runs already made (no engine started).

Each *session* is one sitting of `benchmarks/sim_vs_vllm.py --calibrate-interleaved` (or of
`akvc calibrate --serving` followed by a check): a folder of calibration replays (seed 12) and a
folder of check runs (another seed, 5 repeats per fleet size). For the simulator code and the
package's step probes as they are in this checkout, this script fits the serving stage
(calibrate/serving_fit.py) on

- each session's own calibration replays (`session`; `--no-session-fits` skips them), and
- the calibration replays of the sessions named by `--pool`, together (`pooled`),

takes any profile file as it is (`--profile NAME=FILE`: its serving fit and background stage),
and judges each on every session's check runs (on their mean recorded background, which only a
profile with a background term reads) with the benchmark's envelope (inside the
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.analysis.envelope import (
    MEAN_TOLERANCE_1_INSTANCE,
    envelope,
    perfect_model_passes,
    perfect_model_total,
)
from agentic_kvc.calibrate.serving_fit import ServingRun, fit_serving, mean_background
from agentic_kvc.profiles import CPU_TINY_FILE, load_cpu_profile
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.profiles.fitted import apply_fit


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


def fitted_profiles(
    base: EngineProfile, params: dict[str, Any], host_cores: int
) -> Callable[[int], EngineProfile]:
    """The profile of a serving fit's parameters for a fleet of n instances."""
    return lambda n: apply_fit(
        base, params["scale"], tuple(params["contended"]) if n >= host_cores else None
    )


def envelopes(
    checks: list[ServingRun], host_cores: int
) -> list[tuple[int, list[ServingRun], float | None]]:
    """A session's check runs per fleet size, each with its envelope's mean tolerance."""
    return [
        (
            n,
            [r for r in checks if r.instances == n],
            MEAN_TOLERANCE_1_INSTANCE if n < host_cores else None,
        )
        for n in sorted({r.instances for r in checks})
    ]


def judge(
    profile_for: Callable[[int], EngineProfile], checks: list[ServingRun], host_cores: int
) -> dict[str, Any]:
    """The envelope of one profile on one session's check runs, per fleet size: simulated
    once per size, on the check runs' mean background (0 if any did not record one; only a
    profile with a background term reads it)."""
    out: dict[str, Any] = {}
    backgrounds: dict[str, float] = {}
    perfect = 0.0
    for n, runs, tol in envelopes(checks, host_cores):
        background = mean_background([r.background for r in runs])
        sim = runs[0].simulate(profile_for(n), background)
        out[str(n)] = envelope(sim, [r.real for r in runs], tol)
        backgrounds[str(n)] = background
        perfect += perfect_model_passes([r.real for r in runs], tol)["expected"]
    metrics = [m for size in out.values() for m in size.values()]
    return {
        # How many of these checks a model with no error would pass (analysis/envelope.py).
        "perfect_model_expected": perfect,
        "inside_range": sum(m["inside_range"] for m in metrics),
        "envelope": sum(m["pass"] for m in metrics),
        "checks": len(metrics),
        "cases": out,
        "background_threads": backgrounds,
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


def compare(
    before: dict[str, Any], after: dict[str, Any], sessions: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Two outputs of this script (e.g. two commits) on the same sessions: per fit family and
    fleet size, each one's mean signed log error (bias) and the paired difference of |log error|
    (after - before) over the same checks, with 95% intervals."""
    out = []
    for fit in sorted({r["fit"].split("/")[0] for r in (*before["results"], *after["results"])}):
        for n in ("1", "2"):
            a, b = log_errors(before, fit, n), log_errors(after, fit, n)
            keys = sorted(k for k in a.keys() & b.keys() if not sessions or k[0] in sessions)
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
    ap.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="also judge this profile file as it is (its serving fit and background stage) on "
        "every session, e.g. package=src/agentic_kvc/profiles/data/cpu-tiny.json",
    )
    ap.add_argument(
        "--no-session-fits",
        action="store_true",
        help="skip each session's own fit (judge --pool and --profile only)",
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

    def fit(runs: list[ServingRun]) -> dict[str, Any]:
        return fit_params(fit_serving(base, runs, args.host_cores))

    # family -> session -> (parameters to report, profile per fleet size)
    fits: dict[str, dict[str, tuple[Any, Callable[[int], EngineProfile]]]] = {}
    for n in [] if args.no_session_fits else names:
        params = fit(calibration[n])
        fits[f"session/{n}"] = {n: (params, fitted_profiles(base, params, args.host_cores))}
    if args.pool:
        params = fit([r for n in args.pool for r in calibration[n]])
        fits["pooled"] = dict.fromkeys(
            names, (params, fitted_profiles(base, params, args.host_cores))
        )
    for spec in args.profile:
        label, _, file = spec.partition("=")
        path = Path(file)
        if not (label and path.is_file()):
            ap.error(f"--profile {spec!r}: want NAME=FILE of an existing profile")
        profiles = {n: load_cpu_profile(path, instances=n) for n in (1, args.host_cores)}
        profile_for = lambda n, p=profiles: p[1 if n < args.host_cores else args.host_cores]  # noqa: E731
        fits[f"profile:{label}"] = dict.fromkeys(names, (str(path), profile_for))
    results = []
    for fit_name, per in fits.items():
        for session, (params, profile_for) in per.items():
            verdict = judge(profile_for, checks[session], args.host_cores)
            results.append({"fit": fit_name, "session": session, "params": params, **verdict})
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
    # The same checks for a model with no error: what the repeats' own scatter lets pass.
    perfect = perfect_model_total(
        [
            ([r.real for r in runs], tol)
            for s in names
            for _, runs, tol in envelopes(checks[s], args.host_cores)
        ]
    )
    print(
        f"a perfect model: {perfect['expected']:.1f} of {perfect['checks']} in the envelope on "
        f"average (90%: {perfect['p05']:.0f}..{perfect['p95']:.0f}); all of them with "
        f"probability {perfect['all']:.2g}"
    )
    for fit_name in fits:
        mine = [r for r in results if r["fit"] == fit_name]
        print(
            f"{fit_name:14s}: {sum(r['envelope'] for r in mine)} of "
            f"{sum(r['checks'] for r in mine)} in the envelope"
        )
    doc = {
        "benchmark": "sim_vs_vllm_offline",
        "perfect_model": perfect,
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
    ap.add_argument("--sessions", nargs="+", default=[], help="pair these sessions' checks only")
    args = ap.parse_args(argv)
    before, after = (json.loads(f.read_text()) for f in (args.before, args.after))
    rows = compare(before, after, args.sessions)
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
