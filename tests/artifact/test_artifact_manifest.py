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


def test_machine_table_names_the_processor_model_where_recorded(tmp_path: Path) -> None:
    import json

    hw = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 2}
    label = "Intel(R) Xeon(R) Processor (GenuineIntel, family 6, model 106) [AVX-512]"
    for run, extra in (("old", {}), ("new", {"processor": {"label": label}})):
        (tmp_path / run).mkdir()
        (tmp_path / run / "manifest.json").write_text(
            json.dumps({"hardware": {**hw, **extra}, "started_at": "t"})
        )
    rows = {line.split(" | ")[0]: line for line in describe(tmp_path).splitlines()}
    assert f"| {label} (2 cores)" in rows["| new"]
    assert "| Intel(R) Xeon(R) Processor (2 cores)" in rows["| old"]  # no label: the name
