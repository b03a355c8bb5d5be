"""`akvc workload`: generate, inspect and convert workloads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from agentic_kvc.cli_options import key_values
from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats import FORMATS, read_workload, write_native
from agentic_kvc.workload.generator import PRESETS, synthesize
from agentic_kvc.workload.transform import Overflow, apply_transforms

_FORMAT_HELP = (
    "Input format; 'auto' tells native, mooncake, bailian, tracelab (CSV), tracelab-rounds "
    "and azure apart by the first line."
)


def _output_option(help_text: str) -> Any:
    """The `-o/--output FILE` option every writing subcommand takes."""
    return click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        required=True,
        help=help_text,
    )


def _session_jitter_option() -> Any:
    """`--session-jitter SECONDS`: the run configs' `workload.session_jitter_s`."""
    return click.option(
        "--session-jitter",
        "session_jitter",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        metavar="SECONDS",
        help="Shift each session's whole timeline later by its own offset, uniform in "
        "[0, SECONDS), drawn from --seed and the session id (a subagent moves with its root "
        "session); turn gaps, think times and contents unchanged. Replicates of one trace: "
        "each seed interleaves the session openings differently. 0 is off. The run configs' "
        "workload.session_jitter_s (docs/workloads.md).",
    )


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(2)


def _read(path: Path, fmt: str) -> Any:
    try:
        return read_workload(path, fmt)
    except (WorkloadFormatError, OSError) as exc:
        _fail(exc)


@click.group("workload")
def workload() -> None:
    """Workloads: generate agentic sessions, read public traces, show their statistics.

    Traces: Mooncake (FAST'25, Apache-2.0), TraceLab (CC-BY-4.0), Alibaba Bailian
    (Apache-2.0), Azure LLM inference (CC-BY-4.0). See docs/workloads.md.
    """


@workload.command("synth")
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default="agentic-coding",
    show_default=True,
    help="Session shape: agentic-coding (cold repo dump, tool loop), chat, heavy-tail.",
)
@click.option("--sessions", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Drives the generator and --session-jitter: same seed, same file.",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a generator parameter, e.g. --param continue_prob=0.6 (repeatable; see "
    "SynthParams in workload/generator.py for the list).",
)
@_session_jitter_option()
@_output_option("Native workload file to write (jsonl).")
def synth_cmd(
    preset: str,
    sessions: int,
    seed: int,
    params: tuple[str, ...],
    session_jitter: float,
    output: Path,
) -> None:
    """Generate closed-loop agentic sessions and write them as a native workload file."""
    try:
        wl = synthesize(preset, sessions, seed, key_values(params, "--param"))
        if session_jitter:
            wl = apply_transforms(wl, session_jitter_s=session_jitter, seed=seed)
    except ValueError as exc:
        _fail(exc)
    write_native(wl, output)
    click.echo(f"{output}: {len(wl)} requests in {len(wl.sessions)} sessions", err=True)


def _fmt(v: float, digits: int = 0) -> str:
    return f"{v:,.{digits}f}"


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _print_table(path: Path, s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{path} ({s['meta'].get('format', '?')})", show_header=True)
    t.add_column("statistic")
    t.add_column("value", justify="right")
    rows: list[tuple[str, str]] = [
        ("requests", _fmt(s["requests"])),
        ("sessions", _fmt(s["sessions"])),
        (
            "turns / session mean | p50 | p90 | max",
            " | ".join(
                _fmt(s["turns_per_session"][k], 1 if k == "mean" else 0)
                for k in ("mean", "p50", "p90", "max")
            ),
        ),
    ]
    for name in ("input_tokens", "output_tokens", "new_tokens"):
        d = s[name]
        rows.append(
            (
                f"{name.replace('_', ' ')} mean | p50 | p90 | p99 | max",
                " | ".join(_fmt(d[k]) for k in ("mean", "p50", "p90", "p99", "max")),
            )
        )
    rows += [
        (
            "duration (s) | arrival rate (req/s)",
            f"{_fmt(s['duration_s'], 1)} | {_fmt(s['arrival_rate_per_s'], 3)}",
        ),
        (
            "cold (first turns) | mean new tokens",
            f"{_pct(s['first_turn_share'])} | {_fmt(s['first_turn_new_tokens_mean'])}",
        ),
        (
            "warm (continue an earlier request) | mean new tokens",
            f"{_pct(s['continuation_share'])} | {_fmt(s['continuation_new_tokens_mean'])}",
        ),
        (
            "prefix-hit share of input tokens (unlimited cache)",
            _pct(s["prefix_hit_share_of_input_tokens"]),
        ),
        (
            "hit > 90% | mean new tokens",
            f"{_pct(s['high_hit_share'])} | {_fmt(s['high_hit_new_tokens_mean'])}",
        ),
    ]
    for c, d in s["classes"].items():
        rows.append(
            (f"class {c} | mean new tokens", f"{_pct(d['share'])} | {_fmt(d['new_tokens_mean'])}")
        )
    rows.append(("HEAVY that are first turns", _pct(s["heavy_first_turn_share"])))
    rows.append(
        (
            "think/tool wait (s) p50 | p90",
            f"{_fmt(s['think_s']['p50'], 1)} | {_fmt(s['think_s']['p90'], 1)}",
        )
    )
    for name, value in rows:
        t.add_row(name, value)
    Console().print(t)


@workload.command("stats")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", help=_FORMAT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def stats_cmd(file: Path, fmt: str, as_json: bool) -> None:
    """Statistics of a workload FILE: sizes, sessions, reuse with an unlimited cache, classes.

    Classes (unlimited cache): HEAVY needs >= 20k new tokens; WARM hits > 50% of its prompt
    or needs < 5k new tokens; MEDIUM is the rest. A request is cold when it starts a session
    and warm when it continues an earlier request.
    """
    from agentic_kvc.workload.stats import workload_stats

    s = workload_stats(_read(file, fmt))
    if as_json:
        click.echo(json.dumps(s, indent=2, sort_keys=True))
    else:
        _print_table(file, s)


@workload.command("convert")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", help=_FORMAT_HELP)
@_output_option("Native workload file to write.")
@click.option(
    "--window",
    type=(float, float),
    metavar="START END",
    help="Keep requests arriving in [START, END) seconds; times shift so START becomes 0.",
)
@click.option("--max-sessions", type=click.IntRange(min=1), help="Keep the first N sessions.")
@click.option("--max-requests", type=click.IntRange(min=1), help="Keep the first N requests.")
@click.option(
    "--token-scale",
    type=click.FloatRange(0, 1, min_open=True),
    default=1.0,
    help="Shrink every length by this factor, keeping which blocks are shared.",
)
@click.option(
    "--max-input-tokens",
    type=click.IntRange(min=1),
    help="Longest prompt kept; see --overflow for what happens to longer ones.",
)
@click.option(
    "--overflow",
    type=click.Choice(["drop", "truncate"]),
    default="drop",
    show_default=True,
    help="drop: a too-long request and the rest of its session go; truncate: cut it.",
)
@_session_jitter_option()
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Draws --session-jitter's offsets (same seed, same file); unused without it.",
)
@click.option(
    "--rate-scale",
    type=click.FloatRange(0, min_open=True),
    default=1.0,
    help="Compress arrivals by this factor.",
)
@click.option(
    "--time-scale",
    type=click.FloatRange(0, min_open=True),
    default=1.0,
    help="Multiply arrivals and think times by this factor.",
)
def convert_cmd(
    file: Path,
    fmt: str,
    output: Path,
    window: tuple[float, float] | None,
    max_sessions: int | None,
    max_requests: int | None,
    token_scale: float,
    max_input_tokens: int | None,
    overflow: Overflow,
    session_jitter: float,
    seed: int,
    rate_scale: float,
    time_scale: float,
) -> None:
    """Convert a trace FILE to the native workload format (optionally subset and scaled)."""
    if output.exists() and output.resolve() == file.resolve():
        # The trace would be replaced by its converted (often subset) copy: the source is lost.
        _fail(ValueError(f"{output}: is the input FILE; write the conversion elsewhere"))
    try:
        wl = apply_transforms(
            _read(file, fmt),
            window_s=window,
            max_sessions=max_sessions,
            max_requests=max_requests,
            token_scale=token_scale,
            max_input_tokens=max_input_tokens,
            overflow=overflow,
            session_jitter_s=session_jitter,
            seed=seed,
            rate_scale=rate_scale,
            time_scale=time_scale,
        )
    except ValueError as exc:
        _fail(exc)
    write_native(wl, output)
    click.echo(f"{output}: {len(wl)} requests in {len(wl.sessions)} sessions", err=True)


@workload.command("fetch")
@click.argument("name")
@_output_option("Where the checked trace file goes (e.g. results/traces/NAME.jsonl).")
@click.option(
    "--local-dir",
    "local",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Folder that may hold the trace under its upstream file name (repeatable); "
    "AKVC_TRACES_DIR is searched too. Otherwise it is downloaded.",
)
def fetch_cmd(name: str, output: Path, local: tuple[str, ...]) -> None:
    """Fetch public trace NAME (a local copy or its upstream URL) and check its sha256.

    Known names: mooncake_conversation, tracelab_multi_session_sample,
    tracelab_round_trace_sample, bailian_qwen_coder (see PUBLIC_TRACES in workload/fetch.py).
    """
    from agentic_kvc.workload.fetch import TraceFetchError, fetch_trace

    try:
        source = fetch_trace(name, output, list(local))
    except (TraceFetchError, OSError) as exc:
        _fail(exc)
    click.echo(f"{output}: from {source}", err=True)
