"""`akvc policies`: what routing policies exist and what their parameters are."""

from __future__ import annotations

import json
import typing
from typing import Any

import click
from pydantic import BaseModel

from agentic_kvc.policy.registry import list_policies


def _type_name(annotation: Any) -> str:
    """A short readable type: `int`, `float | None`, `Literal[1, 2]`, `list[int] | None`."""
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def describe(params_model: type[BaseModel]) -> list[dict[str, Any]]:
    out = []
    hints = typing.get_type_hints(params_model)
    for name, field in params_model.model_fields.items():
        out.append(
            {
                "name": name,
                "type": _type_name(hints.get(name, field.annotation)),
                "default": field.get_default(call_default_factory=True),
                "description": field.description or "",
            }
        )
    return out


def catalogue() -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "description": cls.description,
            "module": cls.__module__,
            "params": describe(cls.Params),
        }
        for name, cls in list_policies().items()
    ]


@click.command("policies")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON.")
def policies(name: str | None, as_json: bool) -> None:
    """List the routing policies, with each parameter's type, default and meaning.

    Give a NAME to show one policy. Set parameters in a run config under `policy.params`
    (unknown or ill-typed ones are rejected when the config loads), e.g.

    \b
        policy: {name: unified, params: {overload_factor: 3.0}}
    """
    entries = catalogue()
    if name is not None:
        entries = [e for e in entries if e["name"] == name]
        if not entries:
            known = ", ".join(e["name"] for e in catalogue())
            raise click.BadParameter(f"unknown policy {name!r}; known: {known}", param_hint="NAME")
    if as_json:
        click.echo(json.dumps(entries, indent=2, default=str))
        return
    for e in entries:
        click.echo(f"{e['name']}\n    {e['description']}")
        for p in e["params"]:
            default = json.dumps(p["default"], default=str)
            click.echo(f"    {p['name']}: {p['type']} = {default}")
            if p["description"]:
                click.echo(f"        {p['description']}")
        click.echo("")
