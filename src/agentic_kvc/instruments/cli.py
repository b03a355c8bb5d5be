"""`akvc regret`, `akvc cache-error`, `akvc routers`: the instruments on any run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from agentic_kvc.io import atomic_write_jsonl, read_jsonl

RUN_DIR = click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
SET = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override the run's config (e.g. policy.name=my_policy, fleet.kv_cache_tokens=50000).",
)
OUT = click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the rows (default: beside the run's requests.jsonl).",
)


def _load_run(run_dir: Path, overrides: tuple[str, ...]) -> Any:
    """`rundir.load_run`, its input errors (not a run directory, a config or trace that no
    longer validates) as a one-line error instead of a traceback."""
    from agentic_kvc.instruments.rundir import load_run

    try:
        return load_run(run_dir, list(overrides))
    except ValueError as exc:  # RunDirError, ConfigError, WorkloadFormatError
        raise click.ClickException(str(exc)) from None


def _check(run: Any, records: list[Any]) -> None:
    from agentic_kvc.instruments.rundir import same_records

    same = same_records(run, records)
    if same is False:
        click.echo(
            f"warning: re-simulating {run.run_dir} does not reproduce its requests.jsonl "
            "(code or profile changed since it ran); the rows describe the re-simulation",
            err=True,
        )
    elif same:
        click.echo("re-simulation reproduces the run's requests.jsonl byte for byte", err=True)


def _fmt(x: float | None, scale: float = 1.0, digits: int = 3) -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}"


@click.command("regret")
@RUN_DIR
@click.option("--every", default=10, show_default=True, help="Fork at every Nth decision.")
@click.option(
    "--route-class",
    default=None,
    help="Only decisions of this route class (e.g. HEAVY_COLO); with --every 1 for all of them.",
)
@click.option(
    "--horizon",
    "horizon_s",
    default=10.0,
    show_default=True,
    help="Seconds each fork runs past the decision (the fleet-TTFT window).",
)
@click.option("--max-decisions", type=int, default=None, help="Stop after this many.")
@click.option("--threshold", default=0.05, show_default=True, help="Regret (s) counted as costly.")
@SET
@OUT
def regret(
    run_dir: Path,
    every: int,
    route_class: str | None,
    horizon_s: float,
    max_decisions: int | None,
    threshold: float,
    overrides: tuple[str, ...],
    out: Path | None,
) -> None:
    """Counterfactual regret of the routing decisions of RUN_DIR (re-simulated).

    At sampled decisions the simulated fleet is forked and each alternative (the policy's
    choice, the session's affinity instance, least loaded, best cache, split P/D to each
    prefill candidate) runs forward; regret = the policy's TTFT / E2E / fleet mean TTFT minus
    the best alternative's. Writes regret.jsonl beside requests.jsonl and prints mean and p90
    regret per policy and route class, with the costliest decisions.
    """
    from agentic_kvc.instruments.regret import (
        RegretSettings,
        costliest,
        run_regret,
        summarize_regret,
    )

    run = _load_run(run_dir, overrides)
    settings = RegretSettings(every, route_class, horizon_s, max_decisions)
    records, rows = run_regret(run.config, run.workload, run.profile, settings)
    _check(run, records)
    path = out or run_dir / "regret.jsonl"
    atomic_write_jsonl(path, rows)
    click.echo(f"{len(rows)} decisions -> {path}")
    click.echo("policy  class  n  mean/p90 TTFT regret (ms)  share>thr  winners")
    for g in summarize_regret(rows, threshold):
        click.echo(
            f"{g.policy}  {g.route_class}  {g.n}  {_fmt(g.mean.get('ttft_s'), 1e3, 1)}/"
            f"{_fmt(g.p90.get('ttft_s'), 1e3, 1)}  {_fmt(g.share_above.get('ttft_s'), 1, 2)}  "
            + ",".join(f"{k}:{v}" for k, v in sorted(g.winners.items()))
        )
    for r in costliest(rows, 5):
        click.echo(
            f"  {r['request_id']} t={r['t']:.2f}s {r['route_class']} {r['reason']}: "
            f"{_fmt(r['regret_ttft_s'], 1e3, 1)} ms, best {r['best_ttft_s']} "
            f"{r['placements'][r['best_ttft_s']]} vs {r['placements']['policy']}"
        )


@click.command("cache-error")
@RUN_DIR
@click.option(
    "--from-records",
    is_flag=True,
    help="Use the run's records only (prediction vs engine-reported hit on the chosen "
    "instance); the default for real runs.",
)
@SET
@OUT
def cache_error(
    run_dir: Path, from_records: bool, overrides: tuple[str, ...], out: Path | None
) -> None:
    """Prefix-cache view error of RUN_DIR: estimated and exact views against the truth.

    A simulated run is re-simulated and, at every decision, each view's predicted cached
    tokens per instance is compared with the instance's block pool; a real run (or
    --from-records) compares the recorded prediction with the engine-reported cached tokens.
    Writes cache_error.jsonl and prints false-hit / missed-hit tokens by idle gap and KV usage.
    """
    from agentic_kvc.instruments.cache_error import record_rows, run_cache_error, summarize

    run = _load_run(run_dir, overrides)
    if from_records or run.real:
        rows = record_rows(list(read_jsonl(run_dir / "requests.jsonl")))
    else:
        records, rows = run_cache_error(run.config, run.workload, run.profile)
        _check(run, records)
    path = out or run_dir / "cache_error.jsonl"
    atomic_write_jsonl(path, rows)
    click.echo(f"{len(rows)} decisions -> {path}")
    for by in ("idle_gap_s", "kv_usage"):
        click.echo(f"by {by}: view  bin  pairs  false-hit tok  missed-hit tok  false-hit share")
        for t in summarize(rows, by=by):
            click.echo(
                f"  {t['view']}  {t['bin']}  {t['pairs']}  {t['false_hit_tokens']:.1f}  "
                f"{t['missed_hit_tokens']:.1f}  {t['false_hit_share']:.3f}"
            )


@click.command("routers")
@RUN_DIR
@click.option(
    "--replicas", default="1,2,4,8", show_default=True, help="Router replica counts, comma list."
)
@click.option(
    "--spread",
    type=click.Choice(["session", "random"]),
    default="random",
    show_default=True,
    help="How requests reach replicas: by session (sticky) or at random per request.",
)
@SET
@OUT
def routers(
    run_dir: Path, replicas: str, spread: str, overrides: tuple[str, ...], out: Path | None
) -> None:
    """RUN_DIR's config with R router replicas, each with its own in-flight accounting and
    estimated index (a shared exact view with policy.cache_view=exact).

    Writes routers.jsonl (one row per R: herding = max/mean instance load, affinity loss,
    prefix-hit rate, TTFT p50/p90) and prints it. R = 1 is the run itself.
    """
    from agentic_kvc.instruments.routers import measures, run_routers

    try:
        counts = [int(x) for x in replicas.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{replicas!r}: expected e.g. 1,2,4,8", param_hint="--replicas"
        ) from None
    run = _load_run(run_dir, overrides)
    rows = []
    for r in counts:
        records, samples, _ = run_routers(run.config, run.workload, run.profile, r, spread)  # type: ignore[arg-type]
        if r == 1:
            _check(run, records)
        row = {"replicas": r, "spread": spread, "policy": run.config.policy.name}
        row |= measures(records, samples)
        rows.append(row)
        click.echo(
            f"R={r}: herding {_fmt(row['herding'], 1, 2)}  affinity loss "
            f"{_fmt(row['affinity_loss'], 1, 3)}  hit rate {_fmt(row['hit_rate'], 1, 3)}  "
            f"TTFT p90 {_fmt(row['ttft_p90_s'], 1e3, 1)} ms"
        )
    path = out or run_dir / "routers.jsonl"
    atomic_write_jsonl(path, rows)
    click.echo(f"-> {path}")


@click.command("instruments")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/instruments"),
    show_default=True,
    help="Folder for regret.jsonl, cache_view.jsonl, routers.jsonl.",
)
def instruments(spec: Path, out: Path) -> None:
    """Run the instruments named in SPEC (e.g. config/instruments.yaml) for its policies on
    one simulated config (base run config + --set style overrides), in one process."""
    from agentic_kvc.instruments.suite import load_spec, run_suite

    try:
        parsed = load_spec(spec)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for name, path in run_suite(parsed, out, log=lambda m: click.echo(m, err=True)).items():
        click.echo(f"{name}: {path}")
