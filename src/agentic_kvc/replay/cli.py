"""`akvc replay`: replay a workload file against a proxy or a vLLM server."""

from __future__ import annotations

from pathlib import Path

import click

from agentic_kvc.io import atomic_write_json, atomic_write_jsonl
from agentic_kvc.metrics.summary import summarize


def _no_token_ids(request: object) -> list[int]:
    raise AssertionError("--api chat sends text; no token ids are made")


@click.command("replay")
@click.option("--target", required=True, metavar="URL", help="Base URL of the proxy or server.")
@click.argument("workload_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    default="auto",
    show_default=True,
    help="Workload file format (auto-detected from the first line).",
)
@click.option(
    "--mode",
    type=click.Choice(["closed", "open"]),
    default="closed",
    show_default=True,
    help="closed: a turn is sent when the previous one finished plus its think/tool wait; "
    "open: every request at its own arrival time.",
)
@click.option(
    "--time-scale",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Multiply arrivals and think waits (0.5 = twice as fast, 0 = no waits).",
)
@click.option(
    "--max-inflight-sessions",
    type=click.IntRange(min=1),
    default=None,
    help="At most N sessions active at once; later ones queue in start order.",
)
@click.option("--max-sessions", type=click.IntRange(min=1), default=None, help="First N sessions.")
@click.option(
    "--token-scale",
    type=click.FloatRange(min=0, min_open=True, max=1),
    default=1.0,
    show_default=True,
    help="Shrink every prompt and output by this factor (fit a small model's context).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Per-request timeout in seconds; a request past it is recorded as an error.",
)
@click.option("--model", default=None, help="Model name to send [the target's /v1/models].")
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Model dir for vocab and special ids [the target's model root, if local].",
)
@click.option(
    "--api",
    type=click.Choice(["completions", "chat"]),
    default="completions",
    show_default=True,
    help="completions: token ids to /v1/completions (exact prompt lengths). chat: each "
    "request as a conversation, one message per workload block, to /v1/chat/completions, as "
    "an agent sends it (the proxy renders and tokenizes it; lengths are the engine's, from "
    "its usage).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Workload seed.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write requests.jsonl and summary.json here (refused if it holds a requests.jsonl "
    "already, unless --overwrite).",
)
@click.option("--overwrite", is_flag=True, help="Replace an earlier replay's records in --out.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def replay(
    target: str,
    workload_file: Path,
    fmt: str,
    mode: str,
    time_scale: float,
    max_inflight_sessions: int | None,
    max_sessions: int | None,
    token_scale: float,
    timeout_s: float,
    model: str | None,
    tokenizer: Path | None,
    api: str,
    seed: int,
    out: Path | None,
    overwrite: bool,
    no_progress: bool,
) -> None:
    """Replay WORKLOAD_FILE against TARGET and record per-request timings.

    Prompts are token ids synthesized from the workload's content blocks (shared blocks give
    shared prefixes on the engine), streamed from /v1/completions with ignore_eos and
    max_tokens = the workload's output length; with --api chat, conversations of words to
    /v1/chat/completions instead. TTFT, ITL, TPOT and E2E follow
    `vllm bench serve`. Prints the summary; failed requests are recorded, never waited on.
    """
    import json
    import tempfile

    from agentic_kvc.config import WorkloadConfig
    from agentic_kvc.replay.driver import ReplaySettings
    from agentic_kvc.replay.driver import replay as run_replay
    from agentic_kvc.replay.prompts import target_model, token_fn
    from agentic_kvc.workload import load_workload

    if out is not None:
        # Checked before the replay, which may take hours, not when its records are written.
        if (out / "requests.jsonl").exists() and not overwrite:
            raise click.ClickException(
                f"{out / 'requests.jsonl'}: an earlier replay's records; pass another --out, "
                "or --overwrite to replace them"
            )
        try:
            out.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=out):
                pass
        except OSError as exc:
            raise click.ClickException(f"--out {out}: cannot write there: {exc}") from None
    try:
        wcfg = WorkloadConfig(
            trace=str(workload_file),
            format=fmt,
            mode=mode,  # type: ignore[arg-type]
            max_sessions=max_sessions,
            token_scale=token_scale,
        )
        workload = load_workload(wcfg, seed)
        served, root = target_model(target)
        model_dir = tokenizer or root
        if model_dir is None and api == "completions":
            raise ValueError(
                f"the target's model root is not a local directory; pass --tokenizer DIR "
                f"(served model {served!r})"
            )
        settings = ReplaySettings(
            target=target,
            model=model or served,
            mode=mode,  # type: ignore[arg-type]
            time_scale=time_scale,
            max_inflight_sessions=max_inflight_sessions,
            timeout_s=timeout_s,
            api=api,  # type: ignore[arg-type]
            progress=not no_progress,
        )
        tokens = token_fn(model_dir) if model_dir is not None else _no_token_ids
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"replaying {len(workload)} requests in {len(workload.sessions)} sessions ({mode} loop)",
        err=True,
    )
    records = [r.to_dict() for r in run_replay(workload, settings, tokens)]
    summary = summarize(records)
    if out is not None:
        atomic_write_jsonl(out / "requests.jsonl", records)
        atomic_write_json(out / "summary.json", summary)
        click.echo(f"wrote {out / 'requests.jsonl'}", err=True)
    click.echo(json.dumps(summary["overall"], indent=2))
    errors = summary["overall"]["errors"]
    if errors:
        click.echo(f"warning: {errors} request(s) failed; see their 'error' field", err=True)
