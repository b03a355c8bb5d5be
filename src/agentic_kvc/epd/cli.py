"""`akvc epd ...`: the EPD proxy server and the tiny vision-language model for real EPD runs."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("epd")
def epd() -> None:
    """Encode / prefill-decode disaggregation (docs/epd.md)."""


@epd.command("proxy")
@click.option(
    "--encoder", "encoders", multiple=True, required=True, help="E instance URL (repeat)."
)
@click.option("--pd", "pds", multiple=True, required=True, help="PD instance URL (repeat).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8100, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--concurrent",
    is_flag=True,
    help="Send to E and PD at once (the design's API-server variant) instead of E first.",
)
@click.option("--timeout-s", default=600.0, show_default=True, help="Per upstream request.")
def proxy(
    encoders: tuple[str, ...],
    pds: tuple[str, ...],
    host: str,
    port: int,
    concurrent: bool,
    timeout_s: float,
) -> None:
    """Serve /v1/completions and /v1/chat/completions: each request goes to one E instance
    (least outstanding encodes) with max_tokens=1, then to one PD instance (least outstanding
    requests), whose answer (streamed if asked) is returned. GET /health shows the loads.

    E and PD are vLLM servers started with our encoder-cache connector
    (`agentic_kvc.epd.vllm_ec_connector`, roles ec_producer and ec_consumer, one Redis).
    """
    import uvicorn

    from agentic_kvc.epd.app import EPDApp
    from agentic_kvc.proxy.server import ListenError, bind_socket, uvicorn_config
    from agentic_kvc.security import warn_if_exposed

    try:
        sock = bind_socket(host, port)
    except ListenError as exc:
        raise click.ClickException(str(exc)) from None
    app = EPDApp(list(encoders), list(pds), concurrent=concurrent, timeout_s=timeout_s)
    warn_if_exposed(host, "the EPD proxy")
    bound = sock.getsockname()
    click.echo(f"akvc epd proxy: {len(encoders)} E, {len(pds)} PD on http://{bound[0]}:{bound[1]}")
    uvicorn.Server(uvicorn_config(app, "info")).run(sockets=[sock])  # type: ignore[arg-type]


@epd.command("build-model")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Rebuild even if OUT_DIR already holds a model.")
def build_model(out_dir: Path, force: bool) -> None:
    """Write a tiny BLIP-2-shaped vision-language model (config, tokenizer, processor
    configs) into OUT_DIR; serve it with `--load-format dummy`."""
    from agentic_kvc.epd.tiny_vlm import build_tiny_vlm

    click.echo(str(build_tiny_vlm(out_dir, force=force)))
