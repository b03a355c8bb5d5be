"""`akvc model ...`: build the local model directories real engines serve."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("model")
def model() -> None:
    """Build model directories for real vLLM engines (no hub access needed)."""


@model.command("build-tiny")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Rebuild even if OUT_DIR already holds a model.")
def build_tiny(out_dir: Path, force: bool) -> None:
    """Write a tiny Qwen2 config and a locally trained 8k BPE tokenizer into OUT_DIR.

    Serve it with `--load-format dummy` (random deterministic weights).
    """
    from agentic_kvc.serve.tiny_model import build_tiny_model

    click.echo(str(build_tiny_model(out_dir, force=force)))
