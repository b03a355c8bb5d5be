"""SHA-256 manifest of results/archive/: the archived raw records a `gpu-archive` claim reads.

`MANIFEST.sha256` is in `sha256sum` format (`sha256sum -c MANIFEST.sha256` inside the archive
checks it without this package); MACHINE.md beside it describes the machine the runs came from.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

MANIFEST = "MANIFEST.sha256"
_SKIP = {MANIFEST}


def _files(archive: Path) -> list[Path]:
    return sorted(
        p
        for p in archive.rglob("*")
        if p.is_file() and p.relative_to(archive).as_posix() not in _SKIP
    )


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_text(archive: Path) -> str:
    return "".join(f"{sha256(p)}  {p.relative_to(archive).as_posix()}\n" for p in _files(archive))


def write(archive: Path) -> int:
    text = manifest_text(archive)
    (archive / MANIFEST).write_text(text)
    return text.count("\n")


def verify(archive: Path) -> list[str]:
    """Problems found: a changed, missing or unlisted file (empty when all match)."""
    path = archive / MANIFEST
    if not path.is_file():
        return [f"{path}: missing (write it with `akvc artifact manifest`)"]
    listed: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            return [f"{path}:{n}: not a `sha256sum` line: {line!r}"]
        listed[name] = digest
    problems = []
    present = {p.relative_to(archive).as_posix(): p for p in _files(archive)}
    for name, digest in listed.items():
        if name not in present:
            problems.append(f"{name}: listed in {MANIFEST} but missing")
        elif sha256(present[name]) != digest:
            problems.append(f"{name}: SHA-256 differs from {MANIFEST}")
    problems += [f"{name}: not listed in {MANIFEST}" for name in present if name not in listed]
    return problems
