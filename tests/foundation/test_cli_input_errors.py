"""Bad input to `akvc run`, `run-batch` and the run-directory instruments ends in one line that
names the file, line or field, and an exit status, never a traceback; a run that fails after its
directory was made stays incomplete and says why in its manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agentic_kvc.cli import main
from agentic_kvc.config import load_config

GOOD_ROW = {"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 2]}


def _trace_config(tmp_path: Path, base_config: dict[str, Any], trace: Path) -> Path:
    data = {**base_config, "workload": {"trace": str(trace)}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _bad_trace(tmp_path: Path) -> Path:
    """A Mooncake-format trace whose third line has a non-numeric input length."""
    rows = [GOOD_ROW, {**GOOD_ROW, "timestamp": 1000}, {**GOOD_ROW, "input_length": "many"}]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _batch_good_then(
    tmp_path: Path, base_config: dict[str, Any], second: Path, results: Path
) -> Any:
    """`akvc run-batch` of a valid generated-workload config, then `second`."""
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(base_config))
    specs = [json.dumps([str(good)]), json.dumps([str(second)])]
    return CliRunner().invoke(main, ["run-batch", *specs, "--results", str(results)])


def _no_traceback(result: Any) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_run_with_a_bad_trace_row_names_file_line_and_field(
    tmp_path: Path, base_config: dict[str, Any]
) -> None:
    trace = _bad_trace(tmp_path)
    config = _trace_config(tmp_path, base_config, trace)
    results = tmp_path / "results"
    result = CliRunner().invoke(main, ["run", str(config), "--results", str(results)])
    assert result.exit_code == 2, result.output
    _no_traceback(result)
    assert f"error: {trace}:3: field 'input_length'" in result.stderr
    (run_dir,) = (results / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False
    assert manifest["error"].startswith("WorkloadFormatError: ")
    assert f"{trace}:3" in manifest["error"]
    assert not (run_dir / "requests.jsonl").exists()


def test_run_with_a_missing_trace_makes_no_run_directory(
    tmp_path: Path, base_config: dict[str, Any]
) -> None:
    config = _trace_config(tmp_path, base_config, tmp_path / "absent.jsonl")
    results = tmp_path / "results"
    result = CliRunner().invoke(main, ["run", str(config), "--results", str(results)])
    assert result.exit_code == 2
    _no_traceback(result)
    assert "absent.jsonl" in result.stderr and "workload.trace" in result.stderr
    assert "snakemake --cores 1 traces" in result.stderr  # a rule that exists (workloads.smk)
    assert not (results / "runs").exists()


def test_run_batch_checks_every_trace_before_the_first_run(
    tmp_path: Path, base_config: dict[str, Any]
) -> None:
    results = tmp_path / "results"
    missing = _trace_config(tmp_path, base_config, tmp_path / "absent.jsonl")
    result = _batch_good_then(tmp_path, base_config, missing, results)
    assert result.exit_code == 2
    _no_traceback(result)
    assert "spec 2" in result.stderr and "absent.jsonl" in result.stderr
    assert not (results / "runs").exists()  # the good spec did not run either


def test_run_batch_keeps_the_runs_before_a_bad_trace_row(
    tmp_path: Path, base_config: dict[str, Any]
) -> None:
    results = tmp_path / "results"
    bad = _trace_config(tmp_path, base_config, _bad_trace(tmp_path))
    result = _batch_good_then(tmp_path, base_config, bad, results)
    assert result.exit_code == 2
    _no_traceback(result)
    assert "spec 2" in result.stderr and "bad.jsonl:3" in result.stderr
    done = [
        json.loads((d / "manifest.json").read_text())["complete"]
        for d in (results / "runs").iterdir()
    ]
    assert sorted(done) == [False, True]


@pytest.mark.parametrize("command", ["regret", "cache-error", "routers"])
def test_instruments_on_a_folder_that_is_not_a_run(tmp_path: Path, command: str) -> None:
    folder = tmp_path / "not_a_run"
    folder.mkdir()
    result = CliRunner().invoke(main, [command, str(folder)])
    assert result.exit_code == 1
    _no_traceback(result)
    assert f"{folder}: no config.json (not a run directory)" in result.output

    (folder / "config.json").write_text("{not json")
    result = CliRunner().invoke(main, [command, str(folder)])
    assert result.exit_code == 1
    _no_traceback(result)
    assert f"{folder / 'config.json'}: cannot read it as JSON" in result.output


def test_instruments_name_the_config_json_of_a_run_that_no_longer_validates(
    tmp_path: Path, base_config: dict[str, Any]
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    stale = {**base_config, "policy": {"name": "retired_policy"}}
    (folder / "config.json").write_text(json.dumps(stale))
    result = CliRunner().invoke(main, ["regret", str(folder)])
    assert result.exit_code == 1
    _no_traceback(result)
    assert f"{folder / 'config.json'}: invalid config" in result.output
    assert "field 'policy.name'" in result.output


def test_replay_refuses_an_out_folder_with_records_before_replaying(tmp_path: Path) -> None:
    """Checked up front: the unreachable target shows the replay never started."""
    workload = tmp_path / "w.jsonl"
    res = CliRunner().invoke(main, ["workload", "synth", "--sessions", "2", "-o", str(workload)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    out.mkdir()
    (out / "requests.jsonl").write_text('{"earlier": true}\n')
    args = ["replay", str(workload), "--target", "http://127.0.0.1:9", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    _no_traceback(result)
    assert "an earlier replay's records" in result.output and "--overwrite" in result.output
    assert (out / "requests.jsonl").read_text() == '{"earlier": true}\n'
    result = CliRunner().invoke(main, [*args, "--overwrite"])
    assert "cannot read the served model" in result.output  # past the check, to the target


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-n", "0"], "'-n' / '--instances': 0 is not in the range x>=1"),
        (["--kv-cache-tokens", "-5"], "'--kv-cache-tokens': -5 is not in the range x>=1"),
    ],
)
def test_serve_vllm_rejects_impossible_sizes_as_usage_errors(args: list[str], says: str) -> None:
    result = CliRunner().invoke(main, ["serve", "vllm", "--dry-run", *args])
    assert result.exit_code == 2
    _no_traceback(result)
    assert says in result.output


def test_serve_vllm_names_the_config_file_once(tmp_path: Path) -> None:
    config = tmp_path / "fleet.yaml"
    config.write_text("fleet:\n  instances: many\n")
    result = CliRunner().invoke(main, ["serve", "vllm", "--dry-run", "--config", str(config)])
    assert result.exit_code == 1
    _no_traceback(result)
    assert f"Error: {config}: invalid config" in result.output
    assert "<config>" not in result.output and "field 'fleet.instances'" in result.output


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("workload.generator.params.continue_prob=abc", "field 'params.continue_prob'"),
        ("workload.generator.params.no_such_param=1", "field 'params.no_such_param'"),
        ("workload.generator.preset=no_such_preset", "unknown generator preset"),
    ],
)
def test_run_checks_the_generator_before_anything_runs(
    tmp_path: Path, base_config: dict[str, Any], override: str, says: str
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(base_config))
    results = tmp_path / "results"
    for extra in (["--print-id"], ["--results", str(results)]):
        result = CliRunner().invoke(main, ["run", str(path), "--set", override, *extra])
        assert result.exit_code == 2
        _no_traceback(result)
        assert "error: workload.generator: " in result.stderr and says in result.stderr
    assert not results.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["lifecycle", "decider-sim", "--sessions", "0"], "'--sessions': 0 is not in the range"),
        (["lifecycle", "decider-sim", "--rate", "-1"], "'--rate': -1.0 is not in the range"),
        (["lifecycle", "run", "--help"], None),  # the option exists where the range was added
        (
            ["replay", "w.jsonl", "--target", "http://127.0.0.1:9", "--time-scale", "-1"],
            "'--time-scale': -1.0 is not in the range",
        ),
    ],
)
def test_nonsense_counts_and_rates_are_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str | None
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.jsonl").write_text(json.dumps(GOOD_ROW) + "\n")
    result = CliRunner().invoke(main, args)
    if says is None:
        assert result.exit_code == 0 and "--reps" in result.output
        return
    assert result.exit_code == 2
    _no_traceback(result)
    assert says in result.output


def test_replay_refuses_an_out_folder_it_cannot_write_before_replaying(tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text(json.dumps(GOOD_ROW) + "\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = ["replay", str(workload), "--target", "http://127.0.0.1:9"]
    result = CliRunner().invoke(main, [*args, "--out", str(blocker / "out")])
    assert result.exit_code == 1
    _no_traceback(result)
    assert f"--out {blocker / 'out'}: cannot write there" in result.output


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["fleet.kv_tiers.host_gib=0.000001"], "field 'fleet.kv_tiers.host_gib': "),
        (["fleet.kv_cache_tokens=3"], "field 'fleet.kv_cache_tokens': 3 tokens"),
        (["fleet.hardware=h999"], "fields 'fleet.hardware'/'fleet.model': unknown GPU 'h999'"),
    ],
)
def test_run_names_a_field_its_setup_refuses(
    tmp_path: Path, base_config: dict[str, Any], overrides: list[str], says: str
) -> None:
    """Fields only the run's setup can judge (they need the hardware's profile): one line with
    the config file and the field, exit status 2, the run left incomplete with the reason."""
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(base_config))
    results = tmp_path / "results"
    sets = [a for o in overrides for a in ("--set", o)]
    result = CliRunner().invoke(main, ["run", str(path), *sets, "--results", str(results)])
    assert result.exit_code == 2, result.output
    _no_traceback(result)
    assert f"error: {path}: {says}" in result.stderr
    (run_dir,) = (results / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and says in manifest["error"]

    bad = tmp_path / "bad.yaml"  # the same config as a file, second in a batch
    bad.write_text(yaml.safe_dump(load_config(path, overrides).model_dump(mode="json")))
    batch = _batch_good_then(tmp_path, base_config, bad, tmp_path / "batch")
    assert batch.exit_code == 2, batch.output
    _no_traceback(batch)
    assert "spec 2" in batch.stderr and says in batch.stderr


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (
            ["fleet.kv_tiers.host_gib=1", "fleet.kv_tiers.eviction=retention"],
            "field 'fleet.kv_tiers.eviction': 'retention' holds",
        ),
        (
            ["policy.name=static_pd", "policy.params={prefill: [0], decode: [7]}"],
            "static_pd pool indices [7] out of range for a fleet of 3 instances",
        ),
    ],
)
def test_run_refuses_a_config_whose_fields_disagree_before_any_run(
    tmp_path: Path, base_config: dict[str, Any], overrides: list[str], says: str
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(base_config))
    results = tmp_path / "results"
    sets = [a for o in overrides for a in ("--set", o)]
    for extra in (["--print-id"], ["--results", str(results)]):
        result = CliRunner().invoke(main, ["run", str(path), *sets, *extra])
        assert result.exit_code == 2, result.output
        _no_traceback(result)
        assert f"error: {path}: invalid config" in result.stderr and says in result.stderr
    assert not results.exists()


def _real_config(tmp_path: Path, base_config: dict[str, Any], model: Path, **tiers: Any) -> Path:
    data = {
        **base_config,
        "backend": "vllm",
        "fleet": {"instances": 1, "model": str(model), "block_size": 32, "kv_tiers": tiers},
    }
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_tier_real_engines_cannot_keep_is_refused_at_load(
    tmp_path: Path, base_config: dict[str, Any]
) -> None:
    path = _real_config(tmp_path, base_config, tmp_path, host_gib=1, disk_gib=1)
    result = CliRunner().invoke(main, ["run", str(path), "--print-id"])
    assert result.exit_code == 2, result.output
    _no_traceback(result)
    assert "host_gib and disk_gib are both set" in result.stderr


def test_a_real_fleet_that_cannot_start_is_one_line_and_an_incomplete_run(
    tmp_path: Path, base_config: dict[str, Any], tiny_model: Path
) -> None:
    """The disk tier's folder cannot be made: refused before any engine starts."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = _real_config(tmp_path, base_config, tiny_model, disk_gib=1, disk_path=str(blocker))
    results = tmp_path / "results"
    result = CliRunner().invoke(main, ["run", str(path), "--results", str(results)])
    assert result.exit_code == 1, result.output
    _no_traceback(result)
    assert "error: fleet.kv_tiers.disk_path" in result.stderr
    assert "cannot be created" in result.stderr
    (run_dir,) = (results / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["error"].startswith("LaunchError: ")
