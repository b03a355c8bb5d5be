"""The instruments over a set of policies on one simulated configuration, in one process:
the config section behind the report's regret, cache-view and router sections
(config/instruments.yaml; `akvc instruments SPEC --out DIR`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentic_kvc.config import (
    RunConfig,
    format_validation_error,
    load_config,
    load_yaml,
    override_item,
)
from agentic_kvc.instruments.cache_error import run_cache_error
from agentic_kvc.instruments.regret import RegretSettings, run_regret
from agentic_kvc.instruments.routers import measures, run_routers
from agentic_kvc.io import atomic_write_jsonl
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegretSpec(_Strict):
    every: int = Field(5, ge=1)
    horizon_s: float = Field(10.0, ge=0)
    route_class: str | None = None


class CacheViewSpec(_Strict):
    kv_cache_tokens: list[int] = Field(default_factory=list)  # empty: the base's own


class RoutersSpec(_Strict):
    replicas: list[int] = Field(default_factory=lambda: [1, 2, 4, 8])
    spread: list[str] = Field(default_factory=lambda: ["random"])


class SuiteSpec(_Strict):
    base: str
    # `--set` items, or a mapping of dotted keys to values as an experiment's `set` is written
    # in config/config.yaml.
    set: list[str] = Field(default_factory=list)
    policies: list[str]
    regret: RegretSpec | None = None
    cache_view: CacheViewSpec | None = None
    routers: RoutersSpec | None = None

    @field_validator("set", mode="before")
    @classmethod
    def _items(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return [override_item(str(k), v) for k, v in value.items()]
        return value


def load_spec(path: Path) -> SuiteSpec:
    try:
        return SuiteSpec.model_validate(load_yaml(path.read_text()) or {})
    except ValidationError as exc:
        raise ValueError(format_validation_error(str(path), exc, "instruments spec")) from None
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _config(spec: SuiteSpec, policy: str, extra: Sequence[str] = ()) -> RunConfig:
    return load_config(spec.base, [*spec.set, f"policy.name={policy}", *extra])


def run_suite(
    spec: SuiteSpec, out: Path, log: Callable[[str], None] = lambda _m: None
) -> dict[str, Path]:
    """Run each configured instrument for each policy; write <out>/<instrument>.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    base = _config(spec, spec.policies[0])
    workload = load_workload(base.workload, base.seed)  # the policy does not change it
    if spec.regret is not None:
        rows: list[dict[str, Any]] = []
        settings = RegretSettings(spec.regret.every, spec.regret.route_class, spec.regret.horizon_s)
        for p in spec.policies:
            c = _config(spec, p)
            _rec, got = run_regret(c, workload, profile_for(c), settings)
            rows += got
            log(f"regret {p}: {len(got)} decisions")
        written["regret"] = out / "regret.jsonl"
        atomic_write_jsonl(written["regret"], rows)
    if spec.cache_view is not None:
        rows = []
        for kv in spec.cache_view.kv_cache_tokens or [None]:
            extra = [] if kv is None else [f"fleet.kv_cache_tokens={kv}"]
            for p in spec.policies:
                c = _config(spec, p, extra)
                _rec, got = run_cache_error(c, workload, profile_for(c))
                for r in got:
                    r["kv_cache_tokens"] = c.fleet.kv_cache_tokens
                rows += got
                log(f"cache-view {p} kv={kv}: {len(got)} decisions")
        written["cache_view"] = out / "cache_view.jsonl"
        atomic_write_jsonl(written["cache_view"], rows)
    if spec.routers is not None:
        rows = []
        for p in spec.policies:
            c = _config(spec, p)
            prof = profile_for(c)
            for spread in spec.routers.spread:
                for r in spec.routers.replicas:
                    rec, smp, _ = run_routers(c, workload, prof, r, spread)  # type: ignore[arg-type]
                    row = {"policy": p, "replicas": r, "spread": spread} | measures(rec, smp)
                    # Per request, for paired comparisons across R (same workload, same ids).
                    row["ttft_by_request"] = {
                        x.request_id: x.ttft_s for x in rec if x.ttft_s is not None
                    }
                    rows.append(row)
            log(f"routers {p}: done")
        written["routers"] = out / "routers.jsonl"
        atomic_write_jsonl(written["routers"], rows)
    return written
