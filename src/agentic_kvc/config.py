"""Typed run configuration: YAML in, validated model out, canonical JSON hashed into run_id.

Every field has a default so that a config file only states what differs from them. Unknown
keys are errors (a typo must not silently fall back to a default), and every error names the
dotted field it is about.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentic_kvc.io import dumps_canonical


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (PyYAML keeps the last
    one silently: a pasted second `fleet:` would quietly replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<`: keys set beside it override
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """YAML as `yaml.safe_load` reads it, except that a key repeated in one mapping is a
    `yaml.YAMLError` naming its line."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects


class ConfigError(ValueError):
    """A config that cannot be used; the message names the file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GeneratorConfig(_Strict):
    """A synthetic workload made by `akvc workload synth` at run time."""

    preset: str = "agentic-coding"
    sessions: int = Field(16, ge=1)
    params: dict[str, Any] = Field(default_factory=dict)


class WorkloadConfig(_Strict):
    trace: str | None = None
    format: str = "auto"
    generator: GeneratorConfig | None = None
    mode: Literal["closed", "open"] = "closed"
    # Subsetting and scaling, applied in this order: sessions/window, then scales.
    max_sessions: int | None = Field(None, ge=1)
    max_requests: int | None = Field(None, ge=1)
    window_s: tuple[float, float] | None = None
    time_scale: float = Field(1.0, gt=0)
    rate_scale: float = Field(1.0, gt=0)
    token_scale: float = Field(1.0, gt=0, le=1.0)
    max_input_tokens: int | None = Field(None, ge=1)
    # Each session's timeline shifted by its own offset in [0, session_jitter_s), drawn from
    # the run's seed (workload/transform.py): replicates of a trace that differ. 0 (default):
    # off, and left out of the run id.
    session_jitter_s: float = Field(0.0, ge=0)

    @property
    def uses_seed(self) -> bool:
        """Whether the run's seed changes this workload: the generator draws from it, and
        `session_jitter_s` does; a trace alone replays the same requests whatever the seed."""
        return self.generator is not None or self.session_jitter_s > 0

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if (self.trace is None) == (self.generator is None):
            raise ValueError("set exactly one of workload.trace or workload.generator")
        return self


class KVTiersConfig(_Strict):
    """KV tiers below HBM, per instance (issue 29; real engines: issue 30).

    A tier with capacity 0 is off; with every tier off the fleet is HBM-only and the field is
    left out of the run id. Link numbers left as None come from the hardware profile.
    """

    # Host memory (DRAM) per instance, GiB, and its link to the device (GB/s, bytes).
    host_gib: float = Field(0.0, ge=0)
    host_h2d_gbps: float | None = Field(None, gt=0)
    host_d2h_gbps: float | None = Field(None, gt=0)
    host_latency_s: float | None = Field(None, ge=0)
    # Disk or a remote store: per instance, per node, or one fleet-wide pool.
    disk_gib: float = Field(0.0, ge=0)
    disk_scope: Literal["instance", "node", "fleet"] = "node"
    disk_read_gbps: float | None = Field(None, gt=0)
    disk_write_gbps: float | None = Field(None, gt=0)
    disk_latency_s: float | None = Field(None, ge=0)
    # Store a turn's blocks in the host tier when it ends (vLLM's offloading connector does),
    # instead of only when HBM evicts them.
    write_through: bool = False
    # Without write-through, when blocks go down: "walk" as vLLM 0.32's lazy store does (at HBM
    # eviction, and also when freed if its walk, 2 x max_num_batched_tokens / block_size blocks
    # a step, covers the HBM pool); simulator only: "eviction" at HBM eviction alone, the lazy
    # mode as intended; "free" also when freed whatever the walk's length (a walk that sweeps
    # the whole free queue: the far end of what the lazy mode may do with asynchronous copies).
    # docs/kv_tiers.md, "When the lazy mode stores". "walk": out of the run id.
    lazy_store: Literal["walk", "eviction", "free"] = "walk"
    eviction: Literal["lru", "retention"] = "lru"
    # Real engines only: where the disk tier keeps its files.
    disk_path: str | None = None

    @property
    def enabled(self) -> bool:
        return self.host_gib > 0 or self.disk_gib > 0

    def real_engine_problem(self) -> str | None:
        """What real engines cannot do of these tiers (None: they can). vLLM 0.32's
        SimpleCPUOffloadConnector keeps one LRU tier, host or disk, stored by its own walk;
        `serve/kv_tier_flags.py` maps the rest to its flags."""
        if not self.enabled:
            return "fleet.kv_tiers has no tier on (host_gib and disk_gib are 0)"
        if self.host_gib > 0 and self.disk_gib > 0:
            return (
                "fleet.kv_tiers: host_gib and disk_gib are both set; vLLM's "
                "SimpleCPUOffloadConnector keeps one tier (host or disk) per instance on real "
                "engines"
            )
        if self.eviction != "lru":
            return f"fleet.kv_tiers.eviction {self.eviction!r}: real engines' tier is LRU only"
        if self.lazy_store != "walk":
            return (
                f"fleet.kv_tiers.lazy_store {self.lazy_store!r} is a simulator-only model of "
                "when the lazy store writes; real engines store as vLLM's walk does ('walk')"
            )
        if self.disk_gib > 0 and not self.disk_path:
            return (
                "fleet.kv_tiers.disk_gib > 0 needs fleet.kv_tiers.disk_path (a directory) on "
                "real engines"
            )
        return None


class FleetConfig(_Strict):
    instances: int = Field(2, ge=1, le=1024)
    model: str = "tiny"
    hardware: str = "cpu-tiny"
    roles: list[Literal["combined", "prefill", "decode", "both"]] | None = None
    max_num_seqs: int = Field(256, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1)
    block_size: int = Field(16, ge=1)
    kv_cache_tokens: int | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    # Real engines only: extra CLI flags and env for every instance.
    vllm_args: list[str] = Field(default_factory=list)
    vllm_env: dict[str, str] = Field(default_factory=dict)
    kv_tiers: KVTiersConfig = Field(default_factory=KVTiersConfig)

    @property
    def kv_cache_blocks(self) -> int | None:
        """The engine's KV blocks `kv_cache_tokens` asks for (None: sized by memory)."""
        if self.kv_cache_tokens is None:
            return None
        return -(-self.kv_cache_tokens // self.block_size)

    @model_validator(mode="after")
    def _roles_len(self) -> FleetConfig:
        if self.roles is not None and len(self.roles) != self.instances:
            raise ValueError(
                f"fleet.roles has {len(self.roles)} entries but fleet.instances is {self.instances}"
            )
        return self


class PolicyConfig(_Strict):
    name: str = "round_robin"
    params: dict[str, Any] = Field(default_factory=dict)
    cache_view: Literal["estimated", "exact"] = "estimated"


class SimConfig(_Strict):
    scrape_interval_s: float = Field(1.0, ge=0)
    sample_interval_s: float = Field(1.0, gt=0)
    kv_transfer_fixed_s: float = Field(0.05, ge=0)
    kv_transfer_gbps: float = Field(200.0, gt=0)
    # KV retention across tool pauses: a session's KV stays held this long after its turn
    # ends (sim/engine.py). 0 (default) is vLLM's plain LRU; left out of the run id then.
    kv_retention_ttl_s: float = Field(0.0, ge=0)
    # Pause-aware KV placement (docs/kv_tiers/pause_aware.md, policy/pause.py): per turn the router
    # predicts the session's next tool pause from its pauses so far and tells the engine to
    # hold its KV in HBM that long, or (a predicted pause over `pause_keep_max_s`) to demote
    # it at the turn's end: written below HBM, its blocks first to be reused. Off (default):
    # both fields left out of the run id.
    pause_aware: bool = False
    pause_keep_max_s: float = Field(30.0, gt=0)
    # false: the keep half only (a predicted long pause or an expired hold is released as
    # vLLM releases, not demoted): the ablation of benchmarks/pause_aware.py.
    pause_demote: bool = True
    # Finished sessions first (docs/kv_tiers/pause_aware.md): when a session's last turn ends
    # (the finish signal), its blocks join the head of HBM's free queue, the first reused,
    # instead of the tail (vLLM's LRU). Off (default): left out of the run id.
    finish_first: bool = False
    # Whether the router's estimated view is told of those releases (RouterState.finish: the
    # released prompt goes to the front of its LRU, at once or when a hold runs out), as a
    # router that sent the ask can be. false: the ablation of benchmarks/pause_aware.py
    # --told; left out of the run id unless false with one of them on.
    router_sees_release: bool = True
    # A request's cached prefix becomes the most recent free KV when it arrives at its
    # instance, not when it is admitted (vLLM: a waiting request's hit stays where it is in the
    # free queue, so the requests admitted ahead of it can evict it; docs/kv_tiers/
    # study_followups.md, "Prefixes lost while queued"). Off (default): left out of the run id.
    refresh_on_arrival: bool = False
    # CPU hosts: the mean number of the host's other threads ready to run during the run (a
    # real run records it as host_load's others_runnable). A profile with a background term
    # (calibrate/serving_fit.py) delays requests or slows steps by it; others ignore it.
    # 0 (default): an idle host, left out of the run id.
    host_neighbour_threads: float = Field(0.0, ge=0)


class ReplayConfig(_Strict):
    max_inflight_sessions: int | None = Field(None, ge=1)
    request_timeout_s: float = Field(600.0, gt=0)
    stream: bool = True
    # completions: token ids (exact prompt lengths); chat: each request as a conversation of
    # words, one message per workload block, which the proxy renders and tokenizes as an
    # agent's would be (`akvc replay --api`; real engines only).
    api: Literal["completions", "chat"] = "completions"


class RunConfig(_Strict):
    backend: Literal["sim", "vllm"] = "sim"
    seed: int = 0
    # Repeat index of an otherwise identical run: real engines vary from run to run, so
    # repeats must be distinct runs. Changes run_id and nothing else.
    repeat: int = Field(0, ge=0)
    workload: WorkloadConfig
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)

    @model_validator(mode="after")
    def _policy_known(self) -> RunConfig:
        # Imported here: the policy registry imports config types for its own params.
        from agentic_kvc.policy.registry import validate_policy

        validate_policy(self.policy.name, self.policy.params, self.fleet.instances)
        if self.backend == "sim" and self.replay.api != "completions":
            raise ValueError(
                "field 'replay.api': 'chat' sends conversations to real engines; the simulator "
                "replays token counts (use backend: vllm, or api: completions)"
            )
        tiers = self.fleet.kv_tiers
        problem = tiers.real_engine_problem() if tiers.enabled else None
        if self.backend == "vllm" and problem:
            raise ValueError(problem)
        if (
            self.backend == "sim"
            and tiers.enabled
            and tiers.eviction == "retention"
            and self.sim.kv_retention_ttl_s <= 0
        ):
            raise ValueError(
                "field 'fleet.kv_tiers.eviction': 'retention' holds a paused session's blocks "
                "for sim.kv_retention_ttl_s, which is 0; set it > 0 or use 'lru'"
            )
        return self

    def canonical(self) -> dict[str, Any]:
        out = self.model_dump(mode="json")
        # Only a non-zero repeat is hashed, so every run_id from before the field is unchanged.
        if not out["repeat"]:
            del out["repeat"]
        if not self.workload.session_jitter_s:  # likewise
            del out["workload"]["session_jitter_s"]
        for key in ("kv_retention_ttl_s", "host_neighbour_threads"):
            if not out["sim"][key]:  # likewise: ids from before these fields unchanged
                del out["sim"][key]
        if not self.sim.pause_aware:  # likewise
            del out["sim"]["pause_aware"], out["sim"]["pause_keep_max_s"]
            del out["sim"]["pause_demote"]
        if not self.sim.finish_first:  # likewise
            del out["sim"]["finish_first"]
        if not self.sim.refresh_on_arrival:  # likewise
            del out["sim"]["refresh_on_arrival"]
        if self.sim.router_sees_release or not (self.sim.pause_aware or self.sim.finish_first):
            del out["sim"]["router_sees_release"]
        if self.replay.api == "completions":  # likewise
            del out["replay"]["api"]
        if not self.fleet.kv_tiers.enabled:  # HBM-only: ids from before tiers unchanged
            del out["fleet"]["kv_tiers"]
        elif self.fleet.kv_tiers.lazy_store == "walk":  # likewise
            del out["fleet"]["kv_tiers"]["lazy_store"]
        return out

    def run_id(self) -> str:
        return run_id_of(self.canonical())


def run_id_of(canonical: dict[str, Any]) -> str:
    return hashlib.sha256(dumps_canonical(canonical).encode()).hexdigest()[:12]


def override_item(key: str, value: Any) -> str:
    """`--set` item for a value. JSON is valid YAML, so strings, numbers, lists and mappings
    all come back as they were (`"8"` stays a string, `8` an int)."""
    return f"{key}={json.dumps(value, sort_keys=True, separators=(',', ':'))}"


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], value parsed as YAML so numbers and lists work)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected dotted.key=value")
    key, raw = item.split("=", 1)
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"--set {item!r}: empty key component")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError as exc:  # e.g. a control character or a tab (found by hypothesis)
        raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a mapping")
            node = child
        node[path[-1]] = value
    return data


def format_validation_error(source: str, exc: ValidationError, what: str = "config") -> str:
    """A pydantic error as `SOURCE: invalid WHAT` and one `field 'a.b': message` line each."""
    lines = [f"{source}: invalid {what}"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"]
        if err["type"] == "value_error":  # our own validators' messages, minus pydantic's prefix
            msg = msg.removeprefix("Value error, ")
        # A whole-model validator has no location of its own; its message names the field.
        lines.append(f"  field '{loc}': {msg}" if loc else f"  {msg}")
    return "\n".join(lines)


def load_config(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    name: str | None = None,
) -> RunConfig:
    """Read YAML (or take a dict), apply `--set` overrides, validate; ConfigError on failure.

    `name` is what errors call a dict source (e.g. the run directory's config.json it was read
    from); a file is called by its path."""
    if isinstance(source, dict):
        # Deep copy: overrides write into nested mappings, and the caller's dict must not change.
        data, name = copy.deepcopy(source), name or "<config>"
    else:
        path = Path(source)
        name = str(path)
        try:
            data = load_yaml(path.read_text()) or {}
        except FileNotFoundError as exc:
            raise ConfigError(f"{path}: no such config file") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
    data = apply_overrides(data, overrides or [])
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(name, exc)) from None
    except ValueError as exc:  # raised by validate_policy outside pydantic's wrapping
        raise ConfigError(f"{name}: {exc}") from None
