"""`akvc`: the workbench's command line. Each concept folder contributes its own commands."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentic_kvc.config import ConfigError, load_config

# Subcommands that live with their concepts, imported only when called: importing all of them
# costs ~2 s (jsonschema alone ~1.5 s), paid by every `akvc run-batch` job of the pipeline.
# A module that is absent (an optional part not installed) drops its command.
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "workload": ("agentic_kvc.workload.cli", "workload"),
    "policies": ("agentic_kvc.policy.cli", "policies"),
    "serve": ("agentic_kvc.serve.cli", "serve"),
    "proxy": ("agentic_kvc.proxy.cli", "proxy"),
    "replay": ("agentic_kvc.replay.cli", "replay"),
    "calibrate": ("agentic_kvc.calibrate.cli", "calibrate"),
    "model": ("agentic_kvc.serve.model_cli", "model"),
    "artifact": ("agentic_kvc.artifact.cli", "artifact"),
    "regret": ("agentic_kvc.instruments.cli", "regret"),
    "cache-error": ("agentic_kvc.instruments.cli", "cache_error"),
    "routers": ("agentic_kvc.instruments.cli", "routers"),
    "instruments": ("agentic_kvc.instruments.cli", "instruments"),
    "routers-real": ("agentic_kvc.instruments.routers_real", "routers_real"),
    "lifecycle": ("agentic_kvc.lifecycle.cli", "lifecycle"),
    "epd": ("agentic_kvc.epd.cli", "epd"),
}


def _load_lazy(name: str) -> click.Command | None:
    import importlib

    module, attr = LAZY_COMMANDS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return None
        raise
    return getattr(mod, attr)


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            cmd = _load_lazy(cmd_name)
            if cmd is None:
                return None
            self.add_command(cmd, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentic-kvc")
def main() -> None:
    """agentic_kvc: route multi-turn agentic requests across vLLM instances, real or simulated."""


@main.command("run")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config field by dotted key, e.g. --set fleet.instances=8 (repeatable).",
)
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Results root; the run goes to RESULTS/runs/<run_id>/.",
)
@click.option(
    "--print-id", is_flag=True, help="Resolve and validate, print the run_id, run nothing."
)
def run_cmd(config: Path, overrides: tuple[str, ...], results: Path, print_id: bool) -> None:
    """Resolve and validate CONFIG, run it (unless already complete), print the run directory.

    The run_id is a short hash of the canonical resolved config: the same config always maps
    to the same directory, and any changed field to a new one.
    """
    from agentic_kvc.runs import execute
    from agentic_kvc.serve.procs import ProcessError
    from agentic_kvc.workload.errors import WorkloadFormatError
    from agentic_kvc.workload.load import check_workload_source

    try:
        cfg = load_config(config, list(overrides))
        check_workload_source(cfg.workload)
    except ValueError as exc:  # ConfigError, WorkloadFormatError, a generator parameter
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if print_id:
        click.echo(cfg.run_id())
        return
    try:
        run_dir = execute(cfg, results, log=lambda m: click.echo(m, err=True))
    except WorkloadFormatError as exc:  # a bad row, found as the run reads its trace
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except ConfigError as exc:  # a field the run's setup refuses (e.g. a tier under a block)
        click.echo(f"error: {config}: {exc}", err=True)
        sys.exit(2)
    except ProcessError as exc:  # a real server that would not start (names it, its log tail)
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    summary = run_dir / "summary.json"
    if summary.is_file():
        import json

        from agentic_kvc.metrics.summary import one_line

        click.echo(f"{cfg.run_id()}: {one_line(json.loads(summary.read_text()))}", err=True)
    click.echo(str(run_dir))


@main.command("run-batch")
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Results root; each run goes to RESULTS/runs/<run_id>/.",
)
def run_batch_cmd(specs: tuple[str, ...], results: Path) -> None:
    """Run several configs in one process, in the order given (what the pipeline does with
    simulated runs, and with the variants of one repeat of a real-engine experiment).

    Each SPEC is a JSON list: the config file, then its `dotted.key=value` overrides, e.g.
    '["config/runs/sim_h20_agentic.yaml", "seed=1"]'. Complete runs are skipped; all specs
    are validated before the first run starts. Real runs that launch the same engines share
    them: started once, prefix caches reset before each run; a batch that alternates between
    differently launched fleets keeps each of them up.
    """
    import contextlib
    import json

    from agentic_kvc.runs import execute
    from agentic_kvc.serve.procs import ProcessError
    from agentic_kvc.workload.errors import WorkloadFormatError
    from agentic_kvc.workload.load import check_workload_source

    configs = []
    for i, spec in enumerate(specs):
        try:
            base, *overrides = json.loads(spec)
            configs.append(load_config(Path(base), [str(o) for o in overrides]))
            check_workload_source(configs[-1].workload)
        except (ValueError, TypeError) as exc:  # ConfigError and WorkloadFormatError too
            click.echo(f"error: spec {i + 1} {spec!r}: {exc}", err=True)
            sys.exit(2)
    with contextlib.ExitStack() as stack:
        if any(cfg.backend == "vllm" for cfg in configs):
            # Imported only here: simulated batches should not pay for the serving stack.
            from agentic_kvc.serve.run_backend import fleets_launched, shared_fleets

            stack.enter_context(shared_fleets(keep=fleets_launched(configs)))
        for i, cfg in enumerate(configs):
            click.echo(f"[{i + 1}/{len(configs)}] run {cfg.run_id()}", err=True)
            try:
                click.echo(str(execute(cfg, results, log=lambda m: click.echo(m, err=True))))
            except (WorkloadFormatError, ConfigError) as exc:  # the runs before it are kept
                click.echo(f"error: spec {i + 1} {specs[i]!r}: {exc}", err=True)
                sys.exit(2)
            except ProcessError as exc:
                click.echo(f"error: spec {i + 1} {specs[i]!r}: {exc}", err=True)
                sys.exit(1)
            if cfg.backend == "sim":
                from agentic_kvc.sim.run_backend import free_dropped_fleets

                free_dropped_fleets()  # else the batch grows by every run's stores


if __name__ == "__main__":
    main()
