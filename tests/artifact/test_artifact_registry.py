"""The shipped claims registry validates, and a bad one fails naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentic_kvc.artifact.registry import RegistryError, load_registry

REPO = Path(__file__).resolve().parents[2]
REGISTRY = REPO / "artifact" / "claims.yaml"


def test_shipped_registry_validates_with_at_least_eight_claims() -> None:
    reg = load_registry(REGISTRY)
    assert len(reg.claims) >= 8
    assert {c.tier for c in reg.claims} == {"sim", "cpu-real", "cpu-archive"}
    studies = {c.spec["study"] for c in reg.claims}
    assert len(studies) >= 5
    # The kick-the-tires claim is a registered one.
    reg.get(reg.artifact["kick_the_tires"])


def test_registry_experiments_exist_in_the_default_config() -> None:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    names = {e["name"] for e in cfg["experiments"]}
    for c in load_registry(REGISTRY).claims:
        assert set(c.experiments) <= names, c.id


def _write(tmp_path: Path, mutate) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(REGISTRY.read_text())
    mutate(data)
    out = tmp_path / "claims.yaml"
    out.write_text(yaml.safe_dump(data))
    (tmp_path / "claims.schema.json").write_text(
        (REPO / "artifact" / "claims.schema.json").read_text()
    )
    return out


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["claims"][0].pop("reference"), "claims/0: 'reference' is a required"),
        (lambda d: d["claims"][1].update(tier="gpu"), "claims/1/tier"),
        (lambda d: d["claims"][2].update(target="claim_X"), "claims/2/target"),
        (
            lambda d: d["claims"][3].update(
                id=d["claims"][0]["id"], target=d["claims"][0]["target"]
            ),
            "duplicate",
        ),
        (lambda d: d["claims"][0].pop("baseline"), "'baseline' is a required"),
    ],
)
def test_bad_registry_names_file_and_field(tmp_path: Path, mutate, needle: str) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, mutate)
    with pytest.raises(RegistryError) as err:
        load_registry(path)
    assert str(path) in str(err.value)
    assert needle in str(err.value)
