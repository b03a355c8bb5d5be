"""The claims registry: artifact/claims.yaml, validated against artifact/claims.schema.json.

A claim is one sentence of the paper (a finding of REPORT.md) with what reproduces it: the
experiments whose runs it reads, the two sides it compares, the metric, the reported value and
how far an obtained value may be from it. The Snakefile makes one target per claim from this
file, and ARTIFACT.md is generated from it, so the three cannot disagree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REGISTRY = Path("artifact/claims.yaml")
# Tiers whose runs are real engines: their claims also meet docs/statistics.md's spread rule.
REAL_TIERS = ("cpu-real", "cpu-archive")
SCHEMA = Path("artifact/claims.schema.json")


class RegistryError(ValueError):
    """A registry that does not validate; the message names the file and the field."""


@dataclass(slots=True, frozen=True)
class Claim:
    spec: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.spec["id"])

    @property
    def kind(self) -> str:
        return str(self.spec["kind"])

    @property
    def experiments(self) -> list[str]:
        return list(self.spec.get("experiments", []))

    @property
    def tier(self) -> str:
        return str(self.spec["tier"])

    @property
    def unit(self) -> str:
        """What `reference` and the obtained value are: "relative" (default) or "ms"."""
        return str(self.spec.get("unit", "relative"))

    @property
    def statement(self) -> str:
        return str(self.spec["statement"])

    def to_json(self) -> str:
        """Canonical JSON of the spec: a Snakemake param, so editing one claim reruns only it."""
        return json.dumps(self.spec, sort_keys=True)


@dataclass(slots=True)
class Registry:
    artifact: dict[str, Any]
    claims: list[Claim]

    def get(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        known = ", ".join(c.id for c in self.claims)
        raise KeyError(f"no claim {claim_id!r} in the registry (known: {known})")


def _where(err: jsonschema.ValidationError) -> str:
    return "/".join(str(p) for p in err.absolute_path) or "(top level)"


def load_registry(path: str | Path = REGISTRY, schema: str | Path | None = None) -> Registry:
    """Parse and validate the registry; RegistryError names the file and the offending field."""
    path = Path(path)
    schema_path = Path(schema) if schema else path.with_name(SCHEMA.name)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"{path}: cannot read the claims registry: {exc}") from exc
    validator = jsonschema.Draft202012Validator(json.loads(schema_path.read_text()))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{path}: {_where(e)}: {e.message}" for e in errors[:10]]
        raise RegistryError("\n".join(lines))
    claims = [Claim(c) for c in data["claims"]]
    seen: set[str] = set()
    for i, c in enumerate(claims):
        if c.id in seen:
            raise RegistryError(f"{path}: claims/{i}/id: duplicate claim id {c.id!r}")
        seen.add(c.id)
        if c.spec["target"] != f"claim_{c.id}":
            raise RegistryError(
                f"{path}: claims/{i}/target: {c.spec['target']!r} should be 'claim_{c.id}'"
            )
    return Registry(data["artifact"], claims)
