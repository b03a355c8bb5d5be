"""Expanding config.yaml's experiments into runs keyed by run_id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentic_kvc.analysis.experiments import Plan, expand, read_plan
from agentic_kvc.config import ConfigError, load_config, override_item


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(
        yaml.safe_dump(
            {
                "backend": "sim",
                "workload": {"generator": {"sessions": 2}},
                "fleet": {"instances": 2},
            }
        )
    )
    return tmp_path


def _exp(**kw: Any) -> dict[str, Any]:
    return {"name": "e", "base": "base.yaml", **kw}


def test_matrix_is_a_cartesian_product_of_resolved_runs(root: Path) -> None:
    plan = expand(
        [
            _exp(
                set={"fleet.instances": 4}, matrix={"seed": [0, 1, 2], "fleet.block_size": [16, 32]}
            )
        ],
        root,
    )
    assert len(plan.runs) == 6 and len(set(plan.run_ids())) == 6
    for r in plan.runs:
        cfg = load_config(root / "base.yaml", list(r.overrides))
        assert cfg.run_id() == r.run_id
        assert cfg.fleet.instances == 4
        assert (cfg.seed, cfg.fleet.block_size) == (r.labels["seed"], r.labels["fleet.block_size"])
        assert r.resources == {"gpu": 0}


def test_no_matrix_is_one_run(root: Path) -> None:
    plan = expand([_exp()], root)
    assert [r.run_id for r in plan.runs] == [load_config(root / "base.yaml").run_id()]


def test_bad_value_names_experiment_combination_and_field(root: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        expand([_exp(matrix={"fleet.instances": [2, 0]})], root)
    msg = str(exc.value)
    assert "experiment 'e'" in msg and "fleet.instances=0" in msg
    assert "field 'fleet.instances'" in msg


def test_bad_key_and_unknown_policy(root: Path) -> None:
    with pytest.raises(ConfigError, match=r"field 'fleet\.gpus'"):
        expand([_exp(set={"fleet.gpus": 2})], root)
    with pytest.raises(ConfigError, match=r"field 'policy\.name'"):
        expand([_exp(matrix={"policy.name": ["round_robin", "nope"]})], root)


def test_disabled_tags_and_duplicates(root: Path) -> None:
    exps = [
        _exp(name="a", tags=["sim"]),
        _exp(name="b", tags=["gpu"], set={"seed": 5}),
        _exp(name="c", enabled=False, set={"seed": 6}),
    ]
    assert {r.experiment for r in expand(exps, root).runs} == {"a", "b"}
    assert {r.experiment for r in expand(exps, root, tags=["gpu"]).runs} == {"b"}
    # A tag no experiment carries (a typo) is refused rather than selecting nothing.
    with pytest.raises(
        ConfigError, match=r"select_tags \['gpus'\]: no experiment.*\['gpu', 'sim'\]"
    ):
        expand(exps, root, tags=["gpu", "gpus"])
    with pytest.raises(ConfigError, match="defined twice"):
        expand([_exp(name="a"), _exp(name="a")], root)


def test_string_values_stay_strings() -> None:
    # "8" must not become the int 8 on its way through --set.
    assert override_item("fleet.model", "8") == 'fleet.model="8"'
    assert (
        override_item("policy.params", {"b": 1, "a": [1, 2]}) == 'policy.params={"a":[1,2],"b":1}'
    )


def test_vllm_gpu_runs_hold_one_gpu_per_instance(root: Path) -> None:
    exps = [
        _exp(name="gpu", set={"backend": "vllm", "fleet.hardware": "h100", "fleet.instances": 4}),
        _exp(name="cpu", set={"backend": "vllm", "fleet.hardware": "cpu-tiny"}),
        _exp(
            name="pinned", set={"backend": "vllm", "fleet.hardware": "h100"}, resources={"gpus": 1}
        ),
    ]
    gpus = {r.experiment: r.resources["gpu"] for r in expand(exps, root).runs}
    assert gpus == {"gpu": 4, "cpu": 0, "pinned": 1}


def test_archived_runs_are_marked_and_not_to_run(root: Path) -> None:
    archive = root / "archive"
    plan = expand([_exp(matrix={"seed": [0, 1]})], root, archive)
    assert plan.to_run() == plan.run_ids()
    arch = archive / plan.run_ids()[0]
    arch.mkdir(parents=True)
    for f in ("config.json", "requests.jsonl", "instances.jsonl", "summary.json"):
        (arch / f).write_text("{}\n")
    (arch / "manifest.json").write_text(json.dumps({"complete": True}))
    plan = expand([_exp(matrix={"seed": [0, 1]})], root, archive)
    assert plan.to_run() == plan.run_ids()[1:]


def test_plan_json_roundtrip(root: Path, tmp_path: Path) -> None:
    plan = expand([_exp(matrix={"seed": [0, 1]}, tags=["x"])], root)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_json()))
    assert read_plan(path) == plan
    assert Plan.from_json({"runs": []}).run_ids() == []
