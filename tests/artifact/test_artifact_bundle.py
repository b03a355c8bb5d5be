"""`akvc artifact bundle`: code at a commit, archived records, claims, report, checksums."""

from __future__ import annotations

import tarfile
from pathlib import Path

from agentic_kvc.artifact.bundle import bundle
from agentic_kvc.artifact.manifest import verify
from tests.artifact.pipeline_helpers import REPO


def test_bundle_holds_code_archive_report_and_a_matching_manifest(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(REPO)
    report = tmp_path / "report.html"
    report.write_text("<html>claims</html>")
    out = tmp_path / "a.tar.gz"
    n = bundle(out, "HEAD", REPO / "results" / "archive", tmp_path / "no-claims", report)
    with tarfile.open(out) as tf:
        tf.extractall(tmp_path / "x", filter="data")
    root = tmp_path / "x" / "agentic_kvc-artifact"
    names = sorted(p.name for p in root.iterdir())
    assert names == ["COMMIT", "MANIFEST.sha256", "archive.tar", "code.tar", "report.html"]
    assert n == 4 and verify(root) == []
    with tarfile.open(root / "code.tar") as tf:
        assert any(m.endswith("/artifact/claims.yaml") for m in tf.getnames())
    with tarfile.open(root / "archive.tar") as tf:
        assert "results/archive/MANIFEST.sha256" in tf.getnames()
