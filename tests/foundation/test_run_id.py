"""run_id: a stable hash of the canonical resolved config."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentic_kvc.config import load_config


def test_same_config_same_id(base_config: dict[str, Any]) -> None:
    assert load_config(copy.deepcopy(base_config)).run_id() == load_config(base_config).run_id()


def test_id_is_short_hex(base_config: dict[str, Any]) -> None:
    rid = load_config(base_config).run_id()
    assert len(rid) == 12 and int(rid, 16) >= 0


def test_key_order_is_irrelevant(tmp_path: Path, base_config: dict[str, Any]) -> None:
    def reverse(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: reverse(obj[k]) for k in reversed(list(obj))}
        return obj

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(base_config, sort_keys=True))
    b.write_text(yaml.safe_dump(reverse(base_config), sort_keys=False))
    assert a.read_text() != b.read_text()
    assert load_config(a).run_id() == load_config(b).run_id()


def test_explicit_default_is_the_same_run(base_config: dict[str, Any]) -> None:
    # Stating a default explicitly resolves to the same config, hence the same run.
    explicit = copy.deepcopy(base_config)
    explicit["fleet"]["block_size"] = 16
    explicit["replay"] = {"stream": True}
    assert load_config(explicit).run_id() == load_config(base_config).run_id()


@pytest.mark.parametrize(
    "override",
    [
        "seed=1",
        "fleet.instances=4",
        "fleet.model=other",
        "fleet.hardware=h100",
        "fleet.block_size=32",
        "policy.name=lmetric",
        "policy.cache_view=exact",
        "workload.generator.sessions=4",
        "workload.generator.preset=other",
        "workload.mode=open",
        "workload.time_scale=2.0",
        "sim.kv_transfer_gbps=100",
        "replay.stream=false",
        "backend=vllm",
    ],
)
def test_any_field_change_gives_new_id(base_config: dict[str, Any], override: str) -> None:
    if override.startswith("policy.name="):
        from agentic_kvc.policy import list_policies

        name = override.split("=", 1)[1]
        if name not in list_policies():
            pytest.skip(f"policy {name} not registered yet")
    assert load_config(base_config, [override]).run_id() != load_config(base_config).run_id()


def test_every_leaf_of_the_canonical_config_is_hashed(base_config: dict[str, Any]) -> None:
    """Walk the resolved config; changing any scalar leaf changes the hash."""
    from agentic_kvc.config import run_id_of

    canonical = load_config(base_config).canonical()
    base_id = run_id_of(canonical)

    def leaves(obj: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        if isinstance(obj, dict):
            return [p for k, v in obj.items() for p in leaves(v, (*path, k))]
        return [path]

    paths = leaves(canonical)
    assert len(paths) > 20
    for path in paths:
        changed = copy.deepcopy(canonical)
        node = changed
        for k in path[:-1]:
            node = node[k]
        old = node[path[-1]]
        node[path[-1]] = "changed" if old != "changed" else "other"
        assert run_id_of(changed) != base_id, ".".join(path)


def test_replay_api_is_hashed_for_chat_only(base_config: dict[str, Any]) -> None:
    # Runs from before the field keep their ids; a chat replay is another run.
    real = load_config(base_config, ["backend=vllm"])
    stated = load_config(base_config, ["backend=vllm", "replay.api=completions"])
    chat = load_config(base_config, ["backend=vllm", "replay.api=chat"])
    assert stated.run_id() == real.run_id() != chat.run_id()
    assert "api" not in real.canonical()["replay"]


def test_a_chat_replay_in_the_simulator_is_refused(base_config: dict[str, Any]) -> None:
    from agentic_kvc.config import ConfigError

    with pytest.raises((ConfigError, ValueError), match=r"replay\.api"):
        load_config(base_config, ["replay.api=chat"])
