"""`make artifact-archive`: one tarball for an archival deposit (e.g. Zenodo).

Contents: the code at a commit (`git archive`, so exactly what is committed), the archived raw
records with their manifest, the claim files, the HTML report, and MANIFEST.sha256 over all of
them (`sha256sum -c` checks it after unpacking).
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from pathlib import Path

from agentic_kvc.artifact.manifest import MANIFEST, manifest_text


def bundle(out: Path, commit: str, archive: Path, claims: Path, report: Path | None) -> int:
    """Write the tarball; returns the number of files in its manifest."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "agentic_kvc-artifact"
        root.mkdir()
        code = root / "code.tar"
        subprocess.run(
            [
                "git",
                "archive",
                "--format=tar",
                f"--prefix=agentic_kvc-{commit[:12]}/",
                "-o",
                str(code),
                commit,
            ],
            check=True,
        )
        (root / "COMMIT").write_text(commit + "\n")
        with tarfile.open(root / "archive.tar", "w") as tf:
            tf.add(archive, arcname="results/archive")
        if claims.is_dir():
            with tarfile.open(root / "claims.tar", "w") as tf:
                tf.add(claims, arcname="results/claims")
        if report is not None and report.is_file():
            (root / "report.html").write_bytes(report.read_bytes())
        text = manifest_text(root)
        (root / MANIFEST).write_text(text)
        n = text.count("\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:gz") as tf:
            tf.add(root, arcname=root.name)
    return n
