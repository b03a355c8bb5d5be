"""The instruments' spec file (`akvc instruments SPEC`): its `set` may be `--set` items, as
config/instruments.yaml writes it, or a mapping, as an experiment's `set` is written in
config/config.yaml; both give the same run configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentic_kvc.instruments.suite import _config, load_spec

BASE = "config/runs/sim_h20_agentic.yaml"


def _spec(tmp_path: Path, name: str, set_: object) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"base": BASE, "set": set_, "policies": ["round_robin"]}))
    return path


def test_set_as_items_or_as_a_mapping_gives_the_same_configs(tmp_path: Path) -> None:
    items = ["fleet.instances=4", "fleet.kv_tiers.host_gib=16", 'workload.generator.preset="chat"']
    mapping = {
        "fleet.instances": 4,
        "fleet.kv_tiers.host_gib": 16,
        "workload.generator.preset": "chat",
    }
    a = load_spec(_spec(tmp_path, "items.yaml", items))
    b = load_spec(_spec(tmp_path, "mapping.yaml", mapping))
    ca, cb = _config(a, "round_robin"), _config(b, "round_robin")
    assert ca.run_id() == cb.run_id()
    assert cb.fleet.instances == 4 and cb.fleet.kv_tiers.host_gib == 16
    assert cb.workload.generator is not None and cb.workload.generator.preset == "chat"


def test_a_set_that_is_neither_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = _spec(tmp_path, "bad.yaml", 7)
    with pytest.raises(ValueError) as err:
        load_spec(path)
    assert str(err.value).startswith(f"{path}: invalid instruments spec\n  field 'set': ")
