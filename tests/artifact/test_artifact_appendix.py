"""ARTIFACT.md regenerates byte-identically from the registry; editing either alone is drift."""

from __future__ import annotations

import shutil
from pathlib import Path

from agentic_kvc.artifact.appendix import render
from agentic_kvc.artifact.registry import load_registry
from tests.artifact.pipeline_helpers import REPO, akvc


def test_artifact_md_is_generated_from_the_registry() -> None:
    assert (REPO / "ARTIFACT.md").read_text() == render(
        load_registry(REPO / "artifact/claims.yaml")
    )


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "artifact", tmp_path / "artifact")
    shutil.copy2(REPO / "ARTIFACT.md", tmp_path / "ARTIFACT.md")
    return tmp_path


def test_drift_check_fails_when_either_side_is_edited_alone(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    assert akvc(root, "artifact", "appendix", "--check").returncode == 0
    # The appendix edited alone.
    md = root / "ARTIFACT.md"
    original = md.read_text()
    md.write_text(original.replace("## Abstract", "## Abstract (edited)"))
    out = akvc(root, "artifact", "appendix", "--check")
    assert out.returncode != 0 and "ARTIFACT.md is not what" in out.stderr
    md.write_text(original)
    # The registry edited alone.
    reg = root / "artifact" / "claims.yaml"
    reg.write_text(reg.read_text().replace("reference: -0.449", "reference: -0.5", 1))
    assert akvc(root, "artifact", "appendix", "--check").returncode != 0
    # Regenerated: in step again.
    assert akvc(root, "artifact", "appendix").returncode == 0
    assert akvc(root, "artifact", "appendix", "--check").returncode == 0
