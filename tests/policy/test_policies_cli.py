"""`akvc policies` lists every registered policy with its parameters."""

from __future__ import annotations

import json

from click.testing import CliRunner

from agentic_kvc.cli import main
from agentic_kvc.policy import list_policies


def test_lists_every_policy_with_params() -> None:
    res = CliRunner().invoke(main, ["policies", "--json"])
    assert res.exit_code == 0, res.output
    entries = {e["name"]: e for e in json.loads(res.output)}
    assert set(entries) == set(list_policies())
    unified = {p["name"]: p for p in entries["unified"]["params"]}
    assert unified["overload_factor"]["default"] == 2.0
    assert unified["request_ceiling"]["type"] == "float | None"
    adaptive = {p["name"]: p for p in entries["adaptive"]["params"]}
    assert adaptive["heavy_threshold"]["default"] == 20_000


def test_text_output_and_unknown_name() -> None:
    res = CliRunner().invoke(main, ["policies", "elastic"])
    assert res.exit_code == 0
    assert res.output.startswith("elastic\n") and "kv_transfer_s: float = 0.5" in res.output
    bad = CliRunner().invoke(main, ["policies", "nope"])
    assert bad.exit_code != 0 and "unknown policy 'nope'" in bad.output
