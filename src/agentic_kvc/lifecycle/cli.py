"""`akvc lifecycle`: the PD transfer lifecycle microbenchmark on real vLLM (CPU, NIXL)."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def lifecycle() -> None:
    """PD transfer lifecycle: per-phase timing of P -> D requests (docs/lifecycle.md)."""


@lifecycle.command("run")
@click.option(
    "--grid",
    "grid_name",
    default="default",
    show_default=True,
    help="Named grid (lifecycle.grids.GRIDS): default (3x3x2, the report's subset), cpu "
    "(the scaled CPU grid, 63 cells), gpu (the seeds' grid: 168 cells x 5 repetitions on "
    "Qwen3-Coder-30B-A3B, CUDA), smoke.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Output folder (default results/lifecycle/<grid>).",
)
@click.option(
    "--reps",
    type=click.IntRange(min=1),
    default=None,
    help="Kept repetitions (overrides the grid's).",
)
@click.option(
    "--c",
    "cs",
    type=int,
    multiple=True,
    help="Only these cached-prefix lengths C of the grid (repeatable): one pipeline job per C "
    "(workflow/rules/sweeps.smk).",
)
@click.option(
    "--model",
    default=None,
    help="Model name, path or hub id (overrides the grid's: tiny on CPU, the seeds' model "
    "for gpu).",
)
def run_cmd(
    grid_name: str, out: Path | None, reps: int | None, cs: tuple[int, ...], model: str | None
) -> None:
    """Start P and D (2 vLLM instances of the grid's model), run it, write records + summary.csv.

    Wrap it in `flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock` on a shared machine.
    """
    import signal
    from dataclasses import replace

    from agentic_kvc.analysis.studies.lifecycle import calibration, load_records
    from agentic_kvc.lifecycle.grids import GRIDS
    from agentic_kvc.lifecycle.runner import run_grid

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # Snakemake and timeout stop a job with SIGTERM: unwind as on Ctrl-C, so the fleet's
    # context manager stops both engines instead of leaving them running.
    signal.signal(signal.SIGTERM, _interrupt)

    if grid_name not in GRIDS:
        raise click.BadParameter(f"unknown grid {grid_name!r}; known: {sorted(GRIDS)}")
    grid = GRIDS[grid_name] if reps is None else replace(GRIDS[grid_name], reps=reps)
    if model is not None:
        grid = replace(grid, model=model)
    if cs:
        unknown = sorted(set(cs) - set(grid.cs))
        if unknown:
            raise click.BadParameter(
                f"C {unknown} not in grid {grid_name!r}: {grid.cs}", param_hint="--c"
            )
        grid = replace(grid, cs=[c for c in grid.cs if c in cs])
    out = out or Path("results/lifecycle") / grid_name
    meta = run_grid(grid, out, log=lambda m: click.echo(m, err=True))
    cal = calibration(load_records(out), source=str(out))
    (out / "calibration.json").write_text(json.dumps(cal, indent=1) + "\n")
    click.echo(json.dumps({"out": str(out), "records": meta["records"], "wall_s": meta["wall_s"]}))


@lifecycle.command("report")
@click.argument("records_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--tables", type=click.Path(path_type=Path), default=None)
@click.option("--figures", type=click.Path(path_type=Path), default=None)
def report_cmd(records_dir: Path, tables: Path | None, figures: Path | None) -> None:
    """Print (and with --tables write) the report section for a folder of records."""
    from agentic_kvc.analysis.studies.lifecycle import analyse

    section = analyse(records_dir, figures)
    if tables:
        section.write(tables)
    click.echo(section.markdown())


@lifecycle.command("decider-sim")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("results/lifecycle/decider_sim.jsonl"),
    show_default=True,
)
@click.option(
    "--rate",
    "rates",
    type=click.FloatRange(min=0, min_open=True),
    multiple=True,
    default=(0.25, 0.5, 1.0),
)
@click.option("--seed", "seeds", type=int, multiple=True, default=(0, 1, 2, 3, 4))
@click.option("--sessions", type=click.IntRange(min=1), default=100, show_default=True)
def decider_sim_cmd(out: Path, rates: tuple[float, ...], seeds: tuple[int, ...], sessions: int):
    """Simulate calibrated_split vs fixed split thresholds (256, 2048) across session rates.

    Writes summary rows to OUT and every request's latencies next to it
    (<stem>_requests.parquet); prints TTFT p90 per rate and calibrated vs each threshold with
    its 95% paired interval over seeds (agentic_kvc.paired).
    """
    import polars as pl

    from agentic_kvc.lifecycle.decider_sim import PAIRED_HEADER, paired_table, requests_path, run

    run(out, rates, seeds, sessions)
    click.echo(" | ".join(PAIRED_HEADER))
    for line in paired_table(pl.read_parquet(requests_path(out))):
        click.echo(" | ".join(line))


@lifecycle.command("sim-grid")
@click.option(
    "--grid",
    "grid_name",
    default="gpu",
    show_default=True,
    help="Named grid whose C x N x O to predict (lifecycle.grids.GRIDS).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("results/lifecycle/sim_grid.csv"),
    show_default=True,
)
def sim_grid_cmd(grid_name: str, out: Path) -> None:
    """Predict a lifecycle grid from the simulator's cost model (H20, Qwen3-Coder-30B-A3B).

    Per (C, N, O): P's chunked prefill of N after C cached, the P -> D transfer as the
    simulator charges it (sim.kv_transfer_fixed_s + bytes / sim.kv_transfer_gbps), D's first
    step, the decode, and PD - colocated TTFT. Deterministic; no engines (lifecycle.sim_grid).
    """
    from agentic_kvc.lifecycle.grids import GRIDS
    from agentic_kvc.lifecycle.sim_grid import write

    if grid_name not in GRIDS:
        raise click.BadParameter(f"unknown grid {grid_name!r}; known: {sorted(GRIDS)}")
    g = GRIDS[grid_name]
    n = write(out, g.cs, g.ns, g.os)
    click.echo(json.dumps({"out": str(out), "rows": n}))
