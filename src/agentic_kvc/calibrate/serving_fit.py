"""Second calibration stage: fit the cpu-tiny profile to real serving runs.

`akvc calibrate`'s probes time engine steps one shape at a time on an otherwise idle engine.
In serving, the same engine also streams to clients through the proxy, and its engine-core
loop (Python, between steps) runs beside the API server, the proxy and the client; on a machine
with no spare core those frontends share the model workers' cores too. Probes see neither.
This stage replays a calibration workload (`SERVING_WORKLOAD`, seed 12; the validation in
benchmarks/sim_vs_vllm.py uses seed 11) on real engines and fits, so that the
simulator matches the real runs:

- `prefill_scale` = `step_scale`: one factor on every step cost of a fleet with a spare core,
  fitted to such runs' TTFT and E2E p50/p90 (mean squared log ratio simulated/real over the
  runs and metrics: the quantiles benchmarks/sim_vs_vllm.py checks);
- `contended_slowdown` (`prefill`: the per-token, attention and per-prefill-sequence terms;
  `step`: the per-step overhead and the decode terms) on top, for the part of a step that
  overlaps another instance's step in a fleet with no spare core (instances >= the host's
  cores): then the workers and all the frontends share the cores (sim/fleet.py stretches a
  step in progress when another starts or ends). Fitted to such runs' TTFT and E2E p50/p90
  (mean squared log ratio), after the scale.

A third stage (`akvc calibrate --fit-background`, `fit_background`) adds the host's other
processes: replays beside known neighbours (benchmarks/sim_vs_vllm_neighbours.py) record the
mean number of runnable threads outside their own process tree (serve/hostload.py: the
neighbours' demand; the cores they get depend on the run), and a term per class (`spare`,
`contended`) is fitted on top of the two stages above, each replay simulated beside its own
neighbours: either each request reaches its engine `background_delay_s` later per such thread
(`delay`: the frontends wait for the cores) or every step costs `background_slowdown` more per
thread (`slowdown`). A simulated run reads its neighbours from `sim.host_neighbour_threads`.

Why this form (one scale, a slowdown charged for the overlap only, several runs per
size, quantile losses) and what the alternatives missed: docs/sim_profiles.md, "How the
serving fit was chosen".

What a simulation needs of the fit at run time (a profile with its terms applied) is in
profiles/fitted.py; this module replays and searches.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.profiles import load_cpu_profile
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.profiles.fitted import apply_fit, with_background
from agentic_kvc.profiles.linear import LinearStepCost
from agentic_kvc.sim.run_backend import prepare_sim

SERVING_SEED = 12
# Closed-loop agentic sessions scaled to the tiny model (3k-token prompts at most), loading one
# CPU instance enough that queueing and prefill/decode interference show.
SERVING_WORKLOAD: dict[str, Any] = {
    "generator": {
        "preset": "agentic-coding",
        "sessions": 60,
        "params": {
            "session_rate_per_s": 1.0,
            "max_turns": 6,
            "continue_prob": 0.7,
            "max_context_tokens": 30000,
            "output_max_tokens": 2000,
        },
    },
    "mode": "closed",
    "token_scale": 0.1,
    "max_input_tokens": 3000,
    "time_scale": 0.25,
}
# Runnable threads of other processes the background stage's replays must span (else the term
# cannot be told from the hour's speed).
MIN_BACKGROUND_SPREAD = 0.5
# Forms of the background term (profiles/fitted.py BACKGROUND_FIELDS: the field each fills):
# the search's unit and top value.
BACKGROUND_SEARCH = {
    "slowdown": (1.0, 3.0),  # every step x(1 + 3 n) at most
    "delay": (0.01, 1.0),  # each request up to 1 s later per thread
}
METRICS = (("ttft_s", 50), ("ttft_s", 90), ("e2e_s", 50), ("e2e_s", 90))


def serving_sizes(host_cores: int) -> list[int]:
    """The fleet sizes the serving stage replays: 1 instance (a spare core) and as many as
    the host has cores (none spare: the contended slowdown)."""
    return sorted({1, host_cores})


def serving_config(
    instances: int, backend: str = "vllm", seed: int = SERVING_SEED, repeat: int = 0
) -> RunConfig:
    """The calibration replay on `instances` CPU instances (consistent_hash beyond one);
    `repeat` k > 0 is the k-th distinct run of the same config (its own run_id)."""
    return load_config(
        {
            "backend": backend,
            "seed": seed,
            "repeat": repeat,
            "workload": copy.deepcopy(SERVING_WORKLOAD),
            "fleet": {
                "instances": instances,
                "model": "tiny",
                "hardware": "cpu-tiny",
                "block_size": 32,
                "max_num_seqs": 64,
            },
            "policy": {"name": "unified" if instances == 1 else "consistent_hash"},
            "replay": {"request_timeout_s": 120},
            "sim": {"sample_interval_s": 0.5},
        }
    )


def quantiles(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """TTFT and E2E p50/p90 (numpy's linear interpolation) of the successful records."""
    ok = [r for r in records if not r.get("error") and r.get("e2e_s") is not None]
    if not ok:
        raise ValueError("no successful requests to fit")
    return {
        f"{key[:-2]}_p{q}_s": float(np.percentile([r[key] for r in ok], q)) for key, q in METRICS
    }


def _replay_window(run_dir: Path) -> dict[str, Any]:
    """The replay window of the manifest's host_load (serve/hostload.py), or {}."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    load = (manifest.get("backend_info") or {}).get("host_load") or {}
    return load.get("replay") or load.get("run") or {}


def mean_background(recorded: Sequence[float | None]) -> float:
    """The background a check simulates several real runs on: their mean recorded runnable
    threads of other processes, or 0 when any run did not record it (older runs)."""
    if not recorded or any(x is None for x in recorded):
        return 0.0
    return float(np.mean([x for x in recorded if x is not None]))


class ServingRun:
    """One real run to fit against: its config (re-simulated) and its measured requests."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        cfg_path = run_dir / "config.json"
        if not cfg_path.is_file():
            raise ValueError(f"{run_dir}: not a run directory (no config.json)")
        cfg = load_config(cfg_path)
        if cfg.backend != "vllm" or cfg.fleet.hardware != "cpu-tiny":
            raise ValueError(f"{cfg_path}: need a backend 'vllm' run on hardware 'cpu-tiny'")
        self.instances = cfg.fleet.instances
        rows = list(read_jsonl(run_dir / "requests.jsonl"))
        self.real = quantiles(rows)
        window = _replay_window(run_dir)
        self.load1 = (window.get("load1") or {}).get("mean")
        # Runnable threads outside the run's process tree (the neighbours' demand for the
        # cores; the cores they got depend on the run itself); None for runs from before it
        # was recorded.
        self.background: float | None = (window.get("others_runnable") or {}).get("mean")
        self.sim_config = cfg.model_copy(update={"backend": "sim"})
        # Repeats of one config simulate alike (`repeat` only names a distinct real run) unless
        # the profile has a background term and their backgrounds differ: a fit simulates each
        # distinct (config, background) once per profile.
        self.sim_key = self.sim_config.model_copy(update={"repeat": 0}).run_id()
        self._simulate = prepare_sim(self.sim_config)

    def key(self, profile: EngineProfile) -> tuple[str, float]:
        terms = profile.background_slowdown or profile.background_delay_s
        return self.sim_key, (self.background or 0.0) if terms else 0.0

    def simulate(self, profile: EngineProfile, background: float | None = None) -> dict[str, float]:
        """TTFT/E2E quantiles under `profile` on this run's measured background (or
        `background` threads)."""
        threads = (self.background if background is None else background) or 0.0
        sim = self.sim_config.sim.model_copy(update={"host_neighbour_threads": threads})
        return quantiles(self._simulate(profile, self.sim_config.model_copy(update={"sim": sim})))

    def quantile_loss(self, sim: dict[str, float]) -> float:
        """Mean squared log ratio simulated/real of TTFT and E2E p50 and p90."""
        return float(np.mean([math.log(sim[k] / self.real[k]) ** 2 for k in self.real]))


def mean_loss(runs: Sequence[ServingRun], profile: EngineProfile) -> float:
    """The runs' mean quantile loss under `profile`, one simulation per distinct config."""
    sims: dict[tuple[str, float], dict[str, float]] = {}
    for r in runs:
        if r.key(profile) not in sims:
            sims[r.key(profile)] = r.simulate(profile)
    return float(np.mean([r.quantile_loss(sims[r.key(profile)]) for r in runs]))


def _grid_search(
    loss: Callable[[np.ndarray], float], lo: np.ndarray, hi: np.ndarray, points: int, rounds: int
) -> tuple[np.ndarray, float]:
    """Minimise `loss` over a log-spaced grid in [lo, hi], then re-grid around the best."""
    best, best_loss = lo, math.inf
    # math, not numpy, for log and exp: the grid's points are the same bits on any processor
    # (agentic_kvc.portable).
    llo, lhi = _log(lo), _log(hi)
    for _ in range(rounds):
        axes = [
            np.array([math.exp(v) for v in np.linspace(a, b, points)])
            for a, b in zip(llo, lhi, strict=True)
        ]
        for point in np.array(np.meshgrid(*axes, indexing="ij")).reshape(len(lo), -1).T:
            value = loss(point)
            if value < best_loss:
                best, best_loss = point, value
        width = (lhi - llo) / (points - 1)
        llo, lhi = _log(best) - width, _log(best) + width
    return best, best_loss


def _log(values: np.ndarray) -> np.ndarray:
    return np.array([math.log(v) for v in values])


def fit_serving(base: EngineProfile, runs: Sequence[ServingRun], host_cores: int) -> dict[str, Any]:
    """Fit the scale on runs with a spare core, the contended slowdown on runs without."""
    if not isinstance(base.cost, LinearStepCost):
        raise ValueError("the serving fit applies to a calibrated linear (CPU) profile")
    spare = [r for r in runs if r.instances < host_cores]
    shared = [r for r in runs if r.instances >= host_cores]
    if not spare:
        raise ValueError(f"need a run with fewer instances than the host's {host_cores} cores")

    def scale_loss(x: np.ndarray) -> float:
        prof = apply_fit(base, float(x[0]), None)
        return mean_loss(spare, prof)

    before = scale_loss(np.ones(1))
    (scale,), loss = _grid_search(scale_loss, np.array([0.5]), np.array([4.0]), points=15, rounds=3)
    out: dict[str, Any] = {
        "prefill_scale": round(float(scale), 4),
        "step_scale": round(float(scale), 4),
        "contended_slowdown": None,
        "host_cores": host_cores,
        "loss_before": before,
        "loss": loss,
    }
    contended: tuple[float, float] | None = None
    if shared:

        def slow_loss(x: np.ndarray) -> float:
            prof = apply_fit(base, float(scale), (float(x[0]), float(x[1])))
            return mean_loss(shared, prof)

        (slow_p, slow_s), slow_fit = _grid_search(
            slow_loss, np.array([1.0, 1.0]), np.array([8.0, 8.0]), points=9, rounds=3
        )
        contended = (round(float(slow_p), 4), round(float(slow_s), 4))
        out.update(
            contended_slowdown={"prefill": contended[0], "step": contended[1]},
            contended_loss_before=slow_loss(np.ones(2)),
            contended_loss=slow_fit,
        )
    out["runs"] = []
    for r in runs:
        prof = apply_fit(base, float(scale), contended if r.instances >= host_cores else None)
        sim = r.simulate(prof)
        out["runs"].append(
            {
                "run_dir": str(r.run_dir),
                "instances": r.instances,
                "load1_mean": r.load1,
                "background_threads": r.background,
                "real": r.real,
                "sim": sim,
                "rel_error": {k: sim[k] / r.real[k] - 1 for k in r.real},
            }
        )
    return out


def fit_background(
    fitted: Callable[[int], EngineProfile],
    runs: Sequence[ServingRun],
    host_cores: int,
    form: str = "delay",
) -> dict[str, Any]:
    """The third stage: the background term per class (`spare`: fleets with a spare core,
    `contended`: without), on top of the serving fit (`fitted(instances)`: the profile with
    it), against replays whose recorded backgrounds span at least MIN_BACKGROUND_SPREAD threads
    (beside known neighbours: benchmarks/sim_vs_vllm_neighbours.py). Each replay is simulated
    on its own background; the loss is the serving fit's. (Refitting the scale jointly with
    the term was tried and lost on held-out checks: docs/sim_profiles.md, "Neighbours".)"""
    if form not in BACKGROUND_SEARCH:
        raise ValueError(f"background form {form!r}: one of {', '.join(BACKGROUND_SEARCH)}")
    missing = [str(r.run_dir) for r in runs if r.background is None]
    if missing:
        raise ValueError(
            f"no recorded background (host_load others_runnable): {', '.join(missing)}"
        )
    spread = max(r.background or 0.0 for r in runs) - min(r.background or 0.0 for r in runs)
    if spread < MIN_BACKGROUND_SPREAD:
        raise ValueError(
            f"the replays' backgrounds span {spread:.2f} runnable threads, under "
            f"{MIN_BACKGROUND_SPREAD}: the term cannot be told from the host's speed"
        )
    unit, top = BACKGROUND_SEARCH[form]
    out: dict[str, Any] = {"form": form, "measure": "others_runnable", "host_cores": host_cores}
    for cls, members in (
        ("spare", [r for r in runs if r.instances < host_cores]),
        ("contended", [r for r in runs if r.instances >= host_cores]),
    ):
        if not members:
            continue
        base = fitted(members[0].instances)

        def loss(x: np.ndarray, base: EngineProfile = base, members: list = members) -> float:
            return mean_loss(members, with_background(base, form, (float(x[0]) - 1) * unit))

        best, value = _grid_search(
            loss, np.array([1.0]), np.array([1.0 + top / unit]), points=15, rounds=3
        )
        term = round(max(0.0, float(best[0]) - 1) * unit, 4)
        out[cls] = term
        out[f"{cls}_loss_before"] = mean_loss(members, base)
        out[f"{cls}_loss"] = value
        out.setdefault("runs", []).extend(
            {
                "run_dir": str(r.run_dir),
                "instances": r.instances,
                "background_threads": r.background,
                "real": r.real,
                "sim": (sim := r.simulate(with_background(base, form, term))),
                "rel_error": {k: sim[k] / r.real[k] - 1 for k in r.real},
            }
            for r in members
        )
    return out


def _stamped(result: dict[str, Any]) -> dict[str, Any]:
    """`result` with when and by what command it was fitted (`--fit-runs` and
    `--fit-background` refits leave the probes' own `command` untouched)."""
    import datetime as dt

    result["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    argv0 = "akvc" if Path(sys.argv[0]).name == "akvc" else sys.argv[0]
    result["command"] = " ".join([argv0, *sys.argv[1:]])
    return result


def fit_and_store(
    profile_path: Path, run_dirs: Sequence[Path], host_cores: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Fit the serving stage against `run_dirs` and write it into the profile JSON."""
    base = load_cpu_profile(profile_path, serving_fit=False)
    runs = [ServingRun(Path(d)) for d in run_dirs]
    log(f"fitting against {len(runs)} real run(s): " + ", ".join(str(r.run_dir) for r in runs))
    result = _stamped(fit_serving(base, runs, host_cores))
    doc = json.loads(profile_path.read_text())
    doc["serving_fit"] = result
    atomic_write_json(profile_path, doc)
    return result


def fit_and_store_background(
    profile_path: Path,
    run_dirs: Sequence[Path],
    host_cores: int,
    log: Callable[[str], None],
    form: str = "delay",
) -> dict[str, Any]:
    """Fit the background stage on top of the profile's serving fit; store it there."""
    doc = json.loads(profile_path.read_text())
    if not doc.get("serving_fit"):
        raise ValueError(f"{profile_path}: no serving fit to add a background term to")
    runs = [ServingRun(Path(d)) for d in run_dirs]
    log(f"fitting the background term ({form}) against {len(runs)} real run(s)")
    result = _stamped(
        fit_background(
            lambda n: load_cpu_profile(profile_path, instances=n, background=False),
            runs,
            host_cores,
            form,
        )
    )
    doc["serving_fit"]["background"] = result
    atomic_write_json(profile_path, doc)
    return result
