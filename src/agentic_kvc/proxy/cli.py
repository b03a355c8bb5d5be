"""`akvc proxy`: serve the cache-aware routing proxy in front of vLLM engines."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentic_kvc.cli_options import key_values


def _peer(text: str) -> dict[str, str]:
    engine, sep, addr = text.partition("@")
    if not sep or not engine or ":" not in addr:
        raise ValueError(f"--kv-peer {text!r}: expected ENGINE_ID@HOST:PORT")
    return {"engine_id": engine, "bootstrap_addr": addr}


@click.command("proxy")
@click.option(
    "--engine",
    "--backend",
    "engines",
    multiple=True,
    required=True,
    metavar="URL",
    help="Base URL of a vLLM OpenAI server, e.g. http://127.0.0.1:8001 (repeat per instance; "
    "instance i is the i-th --engine). --backend is its old name, still accepted.",
)
@click.option(
    "--policy",
    default="round_robin",
    show_default=True,
    help="Routing policy name (`akvc policies` lists them).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Policy parameter; VALUE is read as YAML so numbers and lists work (repeatable).",
)
@click.option(
    "--cache-view",
    type=click.Choice(["estimated", "exact"]),
    default="estimated",
    show_default=True,
    help="Prefix-cache view for the policy: 'estimated' records every routed prompt's blocks; "
    "'exact' follows the engines' KV events (give --kv-events per engine).",
)
@click.option(
    "--tier-view",
    is_flag=True,
    help="With --cache-view estimated: also model each engine's KV tier below HBM (host "
    "memory or disk), as the engine states it in /metrics (vllm:simple_kv_offload_info, "
    "vLLM's SimpleCPUOffloadConnector), for policies that price tiers (predicted_ttft, "
    "dynamo_kv, llmd_*). Learned at the first scrape after an engine's first request.",
)
@click.option(
    "--engine-max-num-batched-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="The engines' --max-num-batched-tokens, for --tier-view: it fixes how many freed "
    "blocks vLLM's lazy offload stores per step (default: not known; the view then stores "
    "blocks when HBM evicts them).",
)
@click.option(
    "--kv-events",
    "kv_events",
    multiple=True,
    metavar="ENDPOINT",
    help="ZMQ endpoint of an engine's KV event publisher, e.g. tcp://127.0.0.1:5557 (one per "
    "--engine, in order; vLLM's --kv-events-config endpoint). Needed by --cache-view exact.",
)
@click.option(
    "--kv-connector",
    type=click.Choice(["nixl", "mooncake"]),
    default="nixl",
    show_default=True,
    help="KV connector the engines run, for PD decisions (prefill on one, decode on another).",
)
@click.option(
    "--kv-peer",
    "kv_peers",
    multiple=True,
    metavar="ENGINE_ID@HOST:PORT",
    help="Mooncake only: an engine's id and bootstrap address (one per --engine).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: pick a free one and print it).",
)
@click.option(
    "--records",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append one JSON record per request (timings, route, receipt) to this file.",
)
@click.option(
    "--scrape-interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds between scrapes of each engine's /metrics (running, waiting, KV usage, "
    "block size); 0 turns scraping off.",
)
@click.option(
    "--health-interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds between /health probes of an engine that is out of service.",
)
@click.option(
    "--health-failures",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Consecutive failed checks (a /metrics scrape and then a /health probe, both failing "
    "or timing out) before an engine is marked out of service. A refused connection marks it "
    "out at once; an engine slow under load is not marked out for one late answer.",
)
@click.option(
    "--max-idle-connections",
    default=128,
    show_default=True,
    type=click.IntRange(min=0),
    help="Idle keep-alive connections kept per engine after a burst; more are closed when "
    "their answer ends (busy connections are never capped).",
)
@click.option(
    "--max-sessions",
    default=65536,
    show_default=True,
    type=click.IntRange(min=1),
    help="Sessions the router remembers (which engine each last used, its turn count); "
    "beyond it the least recently routed are forgotten, and a forgotten session's next turn "
    "is routed as a new one (its cached prefix is still found). Bounds a long-running "
    "proxy's memory.",
)
@click.option(
    "--timeout",
    "upstream_timeout",
    default=600.0,
    show_default=True,
    type=float,
    help="Per-request upstream timeout in seconds (whole exchange, stream included).",
)
@click.option(
    "--connect-timeout",
    default=3.0,
    show_default=True,
    type=float,
    help="Seconds to wait for an engine connection before calling it refused.",
)
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Model dir or tokenizer.json for text and chat prompts (default: the engine's model "
    "path from /v1/models, if it is a local directory).",
)
@click.option(
    "--token-memo-mib",
    default=256,
    show_default=True,
    type=click.IntRange(min=0),
    help="Memory for each of the proxy's three prompt memos: the token ids of recent chat and "
    "text prompts (a conversation's next turn reuses its last turn's ids up to a special token "
    "and tokenizes only what it adds), large token-id prompts (a next turn's JSON is read from "
    "where its last turn's ends) and each session's last block hashes (a next turn hashes only "
    "what it adds). Exact: they save time, not change answers; docs/proxy.md. 0 turns them off.",
)
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=None,
    help="Router hashing block size (default: the engine's cache_config_info, else 16).",
)
@click.option(
    "--role",
    "roles",
    multiple=True,
    type=click.Choice(["combined", "prefill", "decode", "both"]),
    help="Role of each engine, in --engine order (default: all combined).",
)
@click.option(
    "--no-retry", is_flag=True, help="Do not retry a request whose engine refused the connection."
)
@click.option(
    "--session-header",
    default=None,
    help="Header naming the session, read before the agent conventions (docs/agents.md).",
)
@click.option(
    "--no-prefix-sessions",
    is_flag=True,
    help="Route requests with no session id as one-offs instead of deriving their session "
    "from the prompt.",
)
@click.option(
    "--finish-first",
    is_flag=True,
    help="On a session's last turn (header x-session-last-turn or body metadata.last_turn), "
    "ask the decode engine to free the turn's KV to the head of its free queue, so it is "
    "reused before paused sessions' KV (needs engines started with AKVC_RELEASE_FIRST=1; "
    "see docs/agents.md).",
)
@click.option(
    "--api-key",
    envvar="AKVC_PROXY_API_KEY",
    default=None,
    show_envvar=True,
    help="Require `Authorization: Bearer KEY` on /v1/* (/health and /metrics stay open). "
    "Prefer the environment variable: a flag is visible in the process list.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Server log level.",
)
def proxy(
    engines: tuple[str, ...],
    policy: str,
    params: tuple[str, ...],
    cache_view: str,
    tier_view: bool,
    engine_max_num_batched_tokens: int | None,
    kv_events: tuple[str, ...],
    kv_connector: str,
    kv_peers: tuple[str, ...],
    host: str,
    port: int,
    records: Path | None,
    scrape_interval: float,
    health_interval: float,
    health_failures: int,
    max_idle_connections: int,
    max_sessions: int,
    upstream_timeout: float,
    connect_timeout: float,
    tokenizer: Path | None,
    token_memo_mib: int,
    block_size: int | None,
    roles: tuple[str, ...],
    no_retry: bool,
    session_header: str | None,
    no_prefix_sessions: bool,
    finish_first: bool,
    api_key: str | None,
    log_level: str,
) -> None:
    """Route OpenAI-compatible requests across vLLM engines (--engine URL) with a routing policy.

    Serves /v1/completions and /v1/chat/completions (streaming or not), /v1/models, /health
    and /metrics. Each response carries x-akvc-* headers naming its route; see docs/proxy.md.
    """
    from agentic_kvc.policy.registry import validate_policy
    from agentic_kvc.proxy.server import run_proxy
    from agentic_kvc.proxy.settings import ProxySettings

    parsed = key_values(params, "--param")
    try:
        validate_policy(policy, parsed, len(engines), "--param (one instance per --engine)")
        settings = ProxySettings(
            engines=list(engines),
            policy=policy,
            params=parsed,
            cache_view=cache_view,  # type: ignore[arg-type]
            tier_view=tier_view,
            engine_max_num_batched_tokens=engine_max_num_batched_tokens,
            host=host,
            port=port,
            records=records,
            scrape_interval_s=scrape_interval,
            health_interval_s=health_interval,
            health_failures=health_failures,
            max_idle_connections=max_idle_connections,
            max_sessions=max_sessions,
            upstream_timeout_s=upstream_timeout,
            connect_timeout_s=connect_timeout,
            tokenizer=tokenizer,
            token_memo_mib=token_memo_mib,
            block_size=block_size,
            roles=list(roles) or None,  # type: ignore[arg-type]
            retry_refused=not no_retry,
            session_header=session_header,
            prefix_sessions=not no_prefix_sessions,
            finish_first=finish_first,
            api_key=api_key or None,
            kv_events=list(kv_events) or None,
            kv_connector=kv_connector,  # type: ignore[arg-type]
            kv_peers=[_peer(p) for p in kv_peers] or None,
        )
        if cache_view == "exact" and not kv_events:
            raise ValueError("--cache-view exact needs --kv-events (one endpoint per --engine)")
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    from agentic_kvc.proxy.records import RecordPathError
    from agentic_kvc.proxy.server import ListenError

    try:
        run_proxy(settings, log_level=log_level)
    except (ListenError, RecordPathError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
