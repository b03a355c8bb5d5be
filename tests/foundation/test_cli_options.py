"""Repeatable KEY=VALUE options, parsed alike by `akvc serve vllm` and `akvc workload synth`."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from agentic_kvc.cli import main
from agentic_kvc.cli_options import key_values


def test_values_are_yaml_unless_asked_for_text() -> None:
    items = ("n=3", "xs=[1, 2]", "name=lmetric", "empty=", "n=4", "url=a=b")
    assert key_values(items, "--param") == {
        "n": 4,  # a later KEY wins
        "xs": [1, 2],
        "name": "lmetric",
        "empty": "",
        "url": "a=b",  # only the first "=" splits
    }
    assert key_values(("OMP=4", "X="), "--env", as_yaml=False) == {"OMP": "4", "X": ""}


@pytest.mark.parametrize("bad", ["novalue", "=3"])
def test_a_missing_key_or_equals_is_a_usage_error_naming_the_option(bad: str) -> None:
    with pytest.raises(click.BadParameter) as err:
        key_values(("ok=1", bad), "--param")
    assert repr(bad) in str(err.value) and err.value.param_hint == "--param"


def test_workload_synth_reports_a_bad_param_as_usage_error(tmp_path) -> None:
    out = tmp_path / "w.jsonl"
    res = CliRunner().invoke(main, ["workload", "synth", "-o", str(out), "--param", "oops"])
    assert res.exit_code == 2 and "'oops': expected KEY=VALUE" in res.output
    assert not out.exists()


def test_proxy_reports_a_bad_param_before_starting() -> None:
    args = ["proxy", "--engine", "http://127.0.0.1:9", "--param", "bad"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and "Invalid value for --param: 'bad'" in res.output
