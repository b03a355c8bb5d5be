"""CITATION.cff, .zenodo.json and LICENSE agree with each other and with pyproject.toml."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib

import pytest
import yaml

from tests.artifact.pipeline_helpers import REPO

CFF_REQUIRED = ("cff-version", "message", "title", "authors")


def test_citation_cff_has_the_required_fields_and_the_project_licence() -> None:
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert all(cff.get(k) for k in CFF_REQUIRED)
    assert cff["cff-version"] == "1.2.0"
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert cff["license"] == project["license"]["text"] == "Apache-2.0"
    assert cff["version"] == project["version"]
    zen = json.loads((REPO / ".zenodo.json").read_text())
    assert zen["license"] == cff["license"] and zen["version"] == cff["version"]
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]


# `make test` installs it in .venv-cff (it cannot share .venv: it pins jsonschema < 4).
CFFCONVERT = REPO / ".venv-cff" / "bin" / "cffconvert"


@pytest.mark.skipif(
    not CFFCONVERT.exists() and shutil.which("cffconvert") is None,
    reason="cffconvert not installed (make test puts it in .venv-cff)",
)
def test_citation_cff_validates_with_cffconvert() -> None:
    exe = str(CFFCONVERT) if CFFCONVERT.exists() else "cffconvert"
    out = subprocess.run(
        [exe, "--validate", "-i", str(REPO / "CITATION.cff")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
