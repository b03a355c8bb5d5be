"""Config validation: every bad key or value is a ConfigError naming the field; the CLI exits
non-zero with that message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agentic_kvc.cli import main
from agentic_kvc.config import ConfigError, load_config


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("fleet.instancez=3", "fleet.instancez"),  # misspelt key
        ("fleet.instances=0", "fleet.instances"),  # out of range
        ("fleet.instances=many", "fleet.instances"),  # wrong type
        ("backend=tpu", "backend"),  # not one of the backends
        ("workload.mode=sideways", "workload.mode"),
        ("policy.name=no_such_policy", "policy.name"),
        ("policy.params.no_such_param=1", "policy.params.no_such_param"),
        ("workload.trace=x.jsonl", "workload"),  # both trace and generator set
        ("replay.request_timeout_s=-1", "replay.request_timeout_s"),
    ],
)
def test_bad_field_is_named(
    tmp_path: Path, base_config: dict[str, Any], override: str, field: str
) -> None:
    path = _write(tmp_path, base_config)
    with pytest.raises(ConfigError) as exc:
        load_config(path, [override])
    msg = str(exc.value)
    assert str(path) in msg
    assert f"field '{field}'" in msg
    # The message is for people: no pydantic internals, no '<root>' placeholder.
    assert "<root>" not in msg and "Value error," not in msg


def test_unknown_policy_lists_known_ones(tmp_path: Path, base_config: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"known: \[.*'round_robin'"):
        load_config(_write(tmp_path, base_config), ["policy.name=nope"])


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("backend: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"nowhere\.yaml: no such config file"):
        load_config(tmp_path / "nowhere.yaml")
    top = tmp_path / "list.yaml"
    top.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(top)


@pytest.mark.parametrize("item", ["fleet.instances", "=3", "fleet..instances=3"])
def test_malformed_override(tmp_path: Path, base_config: dict[str, Any], item: str) -> None:
    with pytest.raises(ConfigError, match="--set"):
        load_config(_write(tmp_path, base_config), [item])


def test_override_values_keep_their_yaml_types(tmp_path: Path, base_config: dict[str, Any]) -> None:
    cfg = load_config(
        _write(tmp_path, base_config),
        ["fleet.instances=5", "fleet.model='8'", "fleet.vllm_args=[--a, --b]"],
    )
    assert cfg.fleet.instances == 5
    assert cfg.fleet.model == "8"
    assert cfg.fleet.vllm_args == ["--a", "--b"]


def test_cli_exits_nonzero_naming_field(tmp_path: Path, base_config: dict[str, Any]) -> None:
    path = _write(tmp_path, base_config)
    result = CliRunner().invoke(
        main, ["run", str(path), "--set", "fleet.instances=-2", "--results", str(tmp_path)]
    )
    assert result.exit_code != 0
    assert "field 'fleet.instances'" in result.output
    assert not (tmp_path / "runs").exists()  # nothing was run


def test_cli_print_id_matches_library(tmp_path: Path, base_config: dict[str, Any]) -> None:
    path = _write(tmp_path, base_config)
    result = CliRunner().invoke(main, ["run", str(path), "--print-id", "--set", "seed=7"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == load_config(path, ["seed=7"]).run_id()


def test_overrides_do_not_mutate_the_callers_dict(base_config: dict[str, Any]) -> None:
    import copy

    before = copy.deepcopy(base_config)
    load_config(base_config, ["fleet.instances=7", "workload.generator.sessions=9"])
    assert base_config == before


def test_cli_run_prints_the_directory_on_stdout_and_a_summary_line_on_stderr(
    tmp_path: Path, base_config: dict[str, Any]
) -> None:
    """Scripts read the run directory from stdout; a person sees the run's figures on stderr,
    taken from its summary.json (a second call, with nothing to run, prints them too)."""
    import json

    from agentic_kvc.metrics.summary import one_line

    path = _write(tmp_path, base_config)
    args = ["run", str(path), "--results", str(tmp_path / "results")]
    for _ in range(2):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        run_dir = Path(result.stdout.strip())
        summary = json.loads((run_dir / "summary.json").read_text())
        line = one_line(summary)
        assert f"{run_dir.name}: {line}" in result.stderr
        n = summary["overall"]["count"]
        assert line.startswith(f"{n:,} requests, 0 failed; TTFT p50 ") and n > 0
    assert "prefix hit rate" in line and line.endswith("%")


def test_one_line_summary_reads_missing_latencies_as_a_dash() -> None:
    from agentic_kvc.metrics.summary import one_line, summarize

    failed = {"route_class": "LIGHT", "error": "refused", "input_tokens": 10, "ttft_s": None}
    line = one_line(summarize([failed]))
    assert line == "1 requests, 1 failed; TTFT p50 -, p90 -; E2E p90 -; prefix hit rate 0.0%"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("seed: 0\nfleet:\n  instances: 2\nfleet:\n  instances: 8\n", 4),  # a pasted section
        ("fleet:\n  instances: 2\n  model: tiny\n  instances: 8\n", 4),  # a nested key
        ("policy: {name: round_robin, name: unified}\n", 1),
    ],
)
def test_a_key_named_twice_is_an_error_naming_its_line(
    tmp_path: Path, text: str, line: int
) -> None:
    """PyYAML keeps the last of two equal keys silently; a run must not quietly take one."""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"appears twice in one mapping[\s\S]*line {line},"):
        load_config(path)


def test_yaml_anchors_and_merges_still_load(tmp_path: Path) -> None:
    """A merge key's mapping is not a repeat: a key set beside `<<` overrides the merged one."""
    text = (
        "backend: sim\nseed: 0\n"
        "workload: {generator: {preset: agentic-coding, sessions: 3}}\n"
        "policy: &p {name: round_robin}\n"
        "fleet:\n  <<: {instances: 3, model: tiny}\n  instances: 4\n"
    )
    path = tmp_path / "run.yaml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.fleet.instances == 4 and cfg.fleet.model == "tiny"
    assert cfg.policy.name == "round_robin"
