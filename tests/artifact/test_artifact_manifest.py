"""The archived raw records match their SHA-256 manifest; a changed or extra file is caught."""

from __future__ import annotations

import shutil
from pathlib import Path

from agentic_kvc.artifact.manifest import MACHINE, describe, verify, write

ARCHIVE = Path(__file__).resolve().parents[2] / "results" / "archive"


def test_shipped_archive_matches_its_manifest() -> None:
    assert verify(ARCHIVE) == []
    # MACHINE.md is what the manifests say (regenerated, not hand-edited).
    assert (ARCHIVE / MACHINE).read_text() == describe(ARCHIVE)


def test_tampered_missing_and_unlisted_files_are_reported(tmp_path: Path) -> None:
    arch = tmp_path / "archive"
    shutil.copytree(ARCHIVE, arch)
    assert verify(arch) == []
    victim = sorted(arch.glob("*/requests.jsonl"))[0]
    victim.write_bytes(victim.read_bytes().replace(b"0", b"1", 1))
    (arch / "extra.txt").write_text("x")
    gone = sorted(arch.glob("*/summary.json"))[0]
    gone.unlink()
    problems = "\n".join(verify(arch))
    assert f"{victim.relative_to(arch).as_posix()}: SHA-256 differs" in problems
    assert "extra.txt: not listed" in problems
    assert f"{gone.relative_to(arch).as_posix()}: listed in MANIFEST.sha256 but missing" in problems
    write(arch)
    assert verify(arch) == []
