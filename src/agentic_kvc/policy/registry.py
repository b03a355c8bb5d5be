"""Policies by name, with their parameters validated by each policy's own model."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from agentic_kvc.policy.base import Policy, PolicyParams

# One module per policy; importing a module registers what it defines.
POLICY_MODULES = (
    "round_robin",
    "lmetric",
    "unified",
    "additive",
    "adaptive",
    "elastic",
    "static_pd",
    "least_loaded",
    "consistent_hash",
    "sglang_cache_aware",
    "prefix_match",  # aibrix_prefix_cache and production_stack_prefix
    "llmd_weighted",
    "llmd_tiered",  # llmd_precise and llmd_tiered (tiers below HBM)
    "session_affinity",  # sticky_least_loaded and session_ttl
    "dynamo_kv",  # also defines dynamo_lmetric
    "conditional_disagg",
    "predicted_ttft",
    "calibrated_split",
)

_REGISTRY: dict[str, type[Policy]] = {}
_loaded = False


def register(cls: type[Policy]) -> type[Policy]:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"policy {cls.name!r} registered twice")
    if not issubclass(cls.Params, PolicyParams):
        raise TypeError(
            f"policy {cls.name!r}: Params must subclass policy.base.PolicyParams "
            f"(or policy.common.StrictParams), not {cls.Params.__name__}"
        )
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if not _loaded:
        for mod in POLICY_MODULES:
            importlib.import_module(f"agentic_kvc.policy.{mod}")
        _loaded = True


def list_policies() -> dict[str, type[Policy]]:
    _load()
    return dict(sorted(_REGISTRY.items()))


def validate_policy(
    name: str,
    params: dict[str, Any],
    instances: int | None = None,
    where: str = "field 'policy.params'",
) -> Any:
    """`params` validated for policy `name`; with `instances`, also refused when they cannot
    route over a fleet that size (`PolicyParams.fleet_problem`; `where` names the input)."""
    _load()
    cls = _REGISTRY.get(name)
    if cls is None:
        raise ValueError(
            f"field 'policy.name': unknown policy {name!r}; known: {sorted(_REGISTRY)}"
        )
    try:
        validated = cls.Params.model_validate(params)
    except ValidationError as exc:
        errs = "; ".join(
            f"field '{'.'.join(['policy.params', *map(str, e['loc'])])}': {e['msg']}"
            for e in exc.errors()
        )
        raise ValueError(errs) from None
    problem = validated.fleet_problem(instances) if instances is not None else None
    if problem:
        raise ValueError(f"{where}: {problem}")
    return validated


def with_fleet_defaults(
    name: str, params: Mapping[str, Any], fleet: Mapping[str, Any]
) -> dict[str, Any]:
    """`params` plus each of `fleet`'s values that the policy declares a parameter for and
    `params` leaves unset. A simulated fleet passes its hardware, model and step budget, so a
    policy that fits the engines' profile (predicted_ttft) fits the one they run unless told
    otherwise; its own defaults (the design's testbed) would price another fleet's steps and
    KV bytes wrongly, and silently. An unknown policy name is left for `get_policy` to refuse."""
    _load()
    cls = _REGISTRY.get(name)
    if cls is None:
        return dict(params)
    fields = cls.Params.model_fields
    return {**{k: v for k, v in fleet.items() if k in fields and k not in params}, **params}


def get_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    validated = validate_policy(name, params or {})
    return _REGISTRY[name](validated)
