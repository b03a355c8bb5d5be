"""The experiment set: `config/config.yaml` expanded into the concrete runs it asks for.

An experiment is a base run config (a YAML file `akvc run` accepts) plus fixed overrides
(`set`) and a matrix of overrides whose cartesian product gives one run each. Every run is
resolved with `load_config` at plan time, so a bad experiment fails before anything runs, with
a message naming the experiment and the field, and every run is known by its `run_id` (the
output path the pipeline builds). A real-engine experiment is just another entry whose base
config says `backend: vllm`; one whose runs were archived (`results/archive/<run_id>/`) is read
from there instead of run again.

The Snakefile, the notebooks and the report all use this one expansion (through the plan file
the pipeline writes), so they agree on which runs belong to which experiment.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentic_kvc.config import ConfigError, RunConfig, load_config, override_item
from agentic_kvc.runs import is_complete
from agentic_kvc.workload.load import check_workload_source

SIM_BATCH_SIZE = 12


@dataclass(slots=True, frozen=True)
class PlannedRun:
    """One run of one experiment: how to produce it and how to label it in tables."""

    run_id: str
    experiment: str
    base: str  # the base config file, as written in config.yaml (relative to the workdir)
    overrides: tuple[str, ...]  # `dotted.key=value` items, in the order they are applied
    labels: dict[str, Any]  # matrix values of this run, e.g. {"policy.name": "lmetric", ...}
    tags: tuple[str, ...]
    backend: str
    policy: str
    seed: int
    # Scheduler resources: `gpu` (one vLLM instance per GPU) and optional `runtime` (minutes)
    # and `mem_mb`, from the experiment's `resources` or derived from the config.
    resources: dict[str, int]
    archived: bool = False  # a complete copy exists under the archive dir: read, don't run
    hardware: str = ""  # fleet.hardware (the simulator's profile data a sim run depends on)
    study: str = ""  # the study (report section) the experiment belongs to, if any
    variant: str = ""  # the experiment's own name for its runs (default: the policy name)
    trace: str = ""  # workload.trace (a file the pipeline may have to fetch first)
    # Real engines: experiments naming the same group share one batch, their runs interleaved
    # (`Plan.real_batches`); empty: the experiment is its own batch.
    interleave: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["overrides"] = list(self.overrides)
        out["tags"] = list(self.tags)
        return out


@dataclass(slots=True)
class Plan:
    runs: list[PlannedRun] = field(default_factory=list)

    def run_ids(self) -> list[str]:
        """Every distinct run_id, in plan order."""
        return list(dict.fromkeys(r.run_id for r in self.runs))

    def to_run(self) -> list[str]:
        """Run ids the pipeline must produce (not archived), in plan order."""
        return list(dict.fromkeys(r.run_id for r in self.runs if not r.archived))

    def sim_batches(self, size: int = SIM_BATCH_SIZE) -> dict[str, list[PlannedRun]]:
        """Simulated runs to produce, in batches of at most `size` that one process runs
        (a simulated run takes about as long as starting Python): per experiment in plan
        order, a run shared by two experiments in the first one's batch. Name: experiment.k."""
        seen: set[str] = set()
        by_exp: dict[str, list[PlannedRun]] = {}
        for r in self.runs:
            if r.archived or r.backend != "sim" or r.run_id in seen:
                continue
            seen.add(r.run_id)
            by_exp.setdefault(r.experiment, []).append(r)
        return {
            f"{exp}.{k // size}": runs[k : k + size]
            for exp, runs in by_exp.items()
            for k in range(0, len(runs), size)
        }

    def real_batches(self) -> dict[str, list[PlannedRun]]:
        """Real-engine runs with a `repeat` label, one batch per experiment, or per
        `interleave` group of experiments: its runs go back to back in one process (`akvc
        run-batch` keeps each fleet they launch and resets its caches before each run),
        repeat by repeat. Within a repeat each experiment's variants are rotated by the
        repeat index, so that each variant runs first, second, ... in turn; a group's
        experiments alternate run by run (a, b, a, b, ...), the one that goes first rotated
        too, so that their pairs (the same variant on two fleets, e.g. HBM only and + host)
        run next to each other, each side first in turn. Name: the experiment, or the group."""
        seen: set[str] = set()
        by_batch: dict[str, dict[int, dict[str, list[PlannedRun]]]] = {}
        for r in self.runs:
            if r.archived or r.backend == "sim" or "repeat" not in r.labels or r.run_id in seen:
                continue
            seen.add(r.run_id)
            rep = int(r.labels["repeat"])
            by_rep = by_batch.setdefault(r.interleave or r.experiment, {})
            by_rep.setdefault(rep, {}).setdefault(r.experiment, []).append(r)
        out: dict[str, list[PlannedRun]] = {}
        for batch, by_rep in by_batch.items():
            out[batch] = []
            for rep in sorted(by_rep):
                columns = [_rotated(runs, rep) for runs in by_rep[rep].values()]
                for row in itertools.zip_longest(*_rotated(columns, rep)):
                    out[batch] += [r for r in row if r is not None]
        return out

    def studies(self) -> list[str]:
        """Every study named by an experiment, in plan order."""
        return list(dict.fromkeys(r.study for r in self.runs if r.study))

    def of_study(self, study: str) -> list[PlannedRun]:
        return [r for r in self.runs if r.study == study]

    def first(self, run_id: str) -> PlannedRun:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise KeyError(f"run_id {run_id!r} is not in the experiment plan")

    def to_json(self) -> dict[str, Any]:
        return {"runs": [r.to_json() for r in self.runs]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        runs = []
        for r in data.get("runs", []):
            runs.append(
                PlannedRun(
                    **{
                        **r,
                        "overrides": tuple(r["overrides"]),
                        "tags": tuple(r["tags"]),
                    }
                )
            )
        return cls(runs)


def read_plan(path: str | Path) -> Plan:
    return Plan.from_json(json.loads(Path(path).read_text()))


def _resources_for(cfg: RunConfig, requested: Mapping[str, int]) -> dict[str, int]:
    out = dict(requested)
    if "gpus" in out:
        out["gpu"] = out.pop("gpus")
    else:
        # Real engines on accelerators hold one GPU per instance; CPU engines and the simulator
        # hold none.
        on_gpu = cfg.backend == "vllm" and not cfg.fleet.hardware.startswith("cpu")
        out["gpu"] = cfg.fleet.instances if on_gpu else 0
    return out


def policy_variants(policies: Sequence[Any]) -> list[str]:
    """What each entry of a `policy` matrix (whole policy mappings: name, params) is called in
    tables: its name, plus, when several entries share that name, the params whose values
    differ between them, e.g. `predicted_ttft (cost_model=online)` beside
    `predicted_ttft (cost_model=profile)`. Params all the entries of a name share (the
    profile both are given) are left out, so a name that appears once stays bare and a
    study's rows keep their names when another variant of a policy joins the matrix."""
    entries = [p if isinstance(p, Mapping) else {"name": p} for p in policies]
    params = [dict(e.get("params") or {}) for e in entries]
    out = []
    for e, mine in zip(entries, params, strict=True):
        name = str(e.get("name", "?"))
        peers = [q for f, q in zip(entries, params, strict=True) if f.get("name") == e.get("name")]
        keys = sorted({k for q in peers for k in q})
        differ = [k for k in keys if k in mine and len({_key(q.get(k)) for q in peers}) > 1]
        shown = ", ".join(f"{k}={_plain(mine[k])}" for k in differ)
        out.append(f"{name} ({shown})" if shown else name)
    return out


def _plain(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def _key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _rotated(items: list[Any], k: int) -> list[Any]:
    """`items` rotated left by k (mod its length)."""
    k %= len(items)
    return items[k:] + items[:k]


def expand_experiment(
    exp: Mapping[str, Any], root: Path, archive: Path | None = None
) -> list[PlannedRun]:
    """All runs of one experiment entry; ConfigError names the experiment and field.

    The matrix key `policy` takes whole policy mappings (`{name: ..., params: {...}}`), so one
    experiment (and, for real engines, one fleet: `Plan.real_batches`) can hold a policy
    with two parameter sets beside other policies; each run's `variant` is then named by
    `policy_variants` unless the experiment names its runs itself."""
    name = str(exp["name"])
    base = str(exp["base"])
    fixed = [override_item(k, v) for k, v in (exp.get("set") or {}).items()]
    matrix: Mapping[str, list[Any]] = exp.get("matrix") or {}
    keys = list(matrix)
    for k in keys:
        if not isinstance(matrix[k], list) or not matrix[k]:
            raise ConfigError(f"experiment {name!r}: matrix.{k} must be a non-empty list")
    policies = matrix.get("policy", [])
    named = dict(zip(map(_key, policies), policy_variants(policies), strict=True))
    out: list[PlannedRun] = []
    configs: list[RunConfig] = []
    for combo in itertools.product(*(matrix[k] for k in keys)):
        labels = dict(zip(keys, combo, strict=True))
        overrides = (*fixed, *(override_item(k, v) for k, v in labels.items()))
        try:
            cfg = load_config(root / base, list(overrides))
            # The generator's parameters too; not trace files: the pipeline may fetch them.
            check_workload_source(cfg.workload, files=False)
        except ValueError as exc:  # ConfigError, or a generator parameter
            where = ", ".join(f"{k}={v!r}" for k, v in labels.items()) or "no matrix"
            raise ConfigError(f"experiment {name!r} ({where}): {exc}") from None
        run_id = cfg.run_id()
        configs.append(cfg)
        out.append(
            PlannedRun(
                run_id=run_id,
                experiment=name,
                base=base,
                overrides=overrides,
                labels=labels,
                tags=tuple(exp.get("tags") or ()),
                backend=cfg.backend,
                policy=cfg.policy.name,
                seed=cfg.seed,
                resources=_resources_for(cfg, exp.get("resources") or {}),
                archived=archive is not None and is_complete(archive / run_id),
                hardware=cfg.fleet.hardware,
                study=str(exp.get("study", "")),
                variant=str(exp.get("variant", "")) or named.get(_key(labels.get("policy")), ""),
                trace=cfg.workload.trace or "",
                interleave=str(exp.get("interleave", "")),
            )
        )
    _check_replicates_differ(name, out, configs)
    if exp.get("interleave") and any(r.backend == "sim" or "repeat" not in r.labels for r in out):
        raise ConfigError(
            f"experiment {name!r}: interleave groups real-engine runs repeated by the matrix "
            f"key `repeat` (Plan.real_batches); this experiment has simulated runs or no repeat"
        )
    return out


def _simulated_as(cfg: RunConfig) -> str:
    """What a simulated run computes, as a canonical string: its config without what changes
    only its run id (`repeat`) and without `seed` where the seed drives nothing
    (`sim.run_backend.seed_uses`). Two runs with one key give byte-identical records."""
    from agentic_kvc.sim.run_backend import seed_uses  # the simulator, only for simulated runs

    out = cfg.canonical()
    out.pop("repeat", None)
    try:
        uses = seed_uses(cfg)
    except ValueError:  # an unknown profile: the run fails on its own; keep the seed
        uses = ["?"]
    if not uses:
        del out["seed"]
    return json.dumps(out, sort_keys=True)


def _check_replicates_differ(name: str, runs: list[PlannedRun], configs: list[RunConfig]) -> None:
    """Plan-time guard: distinct runs of one simulated experiment that must give the same
    records (a trace run's seeds, a simulated run's repeats) are an error, not replicates
    (their paired intervals would be a bootstrap of one run). Real engines vary from run to
    run, so their repeats are real replicates and are not checked."""
    first: dict[str, PlannedRun] = {}
    for run, cfg in zip(runs, configs, strict=True):
        if cfg.backend != "sim":
            continue
        other = first.setdefault(_simulated_as(cfg), run)
        if other.run_id == run.run_id:
            continue
        differ = sorted(k for k in run.labels if run.labels[k] != other.labels.get(k))
        a = ", ".join(f"{k}={other.labels[k]!r}" for k in differ)
        b = ", ".join(f"{k}={run.labels[k]!r}" for k in differ)
        raise ConfigError(
            f"experiment {name!r}: runs ({a}) and ({b}) are the same simulation, so they "
            f"cannot be replicates: in the simulator `repeat` only renames a run, and the seed "
            f"drives only a generated workload, workload.session_jitter_s and "
            f"sim.host_neighbour_threads' ingress delays (a trace replays the same requests "
            f"whatever the seed). Vary what the runs replay (workload.session_jitter_s, "
            f"workload.window_s) or drop the field from the matrix."
        )


def expand(
    experiments: Iterable[Mapping[str, Any]],
    root: Path,
    archive: Path | None = None,
    tags: Iterable[str] | None = None,
) -> Plan:
    """The plan for every enabled experiment (and, if `tags` is given, only those tagged so).
    A tag no experiment carries is refused (a typo would otherwise select nothing, silently)."""
    experiments = list(experiments)
    wanted = set(tags or ())
    known = {str(t) for exp in experiments for t in exp.get("tags") or ()}
    if wanted - known:
        raise ConfigError(
            f"select_tags {sorted(wanted - known)}: no experiment carries "
            f"{'it' if len(wanted - known) == 1 else 'them'}; tags in use: {sorted(known)}"
        )
    plan = Plan()
    seen: set[str] = set()
    for exp in experiments:
        if exp["name"] in seen:
            raise ConfigError(f"experiment {exp['name']!r} is defined twice")
        seen.add(exp["name"])
        if not exp.get("enabled", True):
            continue
        if wanted and not wanted & set(exp.get("tags") or ()):
            continue
        plan.runs.extend(expand_experiment(exp, root, archive))
    return plan
