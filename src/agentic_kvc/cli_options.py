"""What several `akvc` subcommands parse alike: repeatable KEY=VALUE options."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click
import yaml


def key_values(items: Iterable[str], option: str, *, as_yaml: bool = True) -> dict[str, Any]:
    """`("a=1", "b=[2, 3]")` -> `{"a": 1, "b": [2, 3]}`: each VALUE read as YAML so numbers and
    lists work (kept as text with `as_yaml=False`, e.g. environment variables); an empty VALUE
    is "". A later KEY wins. A missing `=` or KEY is a usage error naming `option`."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint=option)
        out[key] = (yaml.safe_load(raw) if raw else "") if as_yaml else raw
    return out
