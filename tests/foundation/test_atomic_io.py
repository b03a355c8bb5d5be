"""Atomic writes: a reader sees the old file or the new one, never a partial one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_kvc.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, read_jsonl


def _rows_then_fail(n: int) -> Iterator[dict[str, int]]:
    for i in range(n):
        yield {"i": i}
    raise RuntimeError("backend died mid-write")


def test_failed_write_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    atomic_write_jsonl(path, [{"old": 1}])
    with pytest.raises(RuntimeError, match="mid-write"):
        atomic_write_jsonl(path, _rows_then_fail(1000))
    assert list(read_jsonl(path)) == [{"old": 1}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.jsonl"]


def test_failed_first_write_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "manifest.json"
    with pytest.raises(TypeError):
        atomic_write_json(path, {"not": object()})  # not JSON-serialisable
    assert not path.exists()
    assert not path.parent.exists() or list(path.parent.iterdir()) == []


def test_interrupt_during_rename_keeps_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old")

    def boom(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("agentic_kvc.io.os.replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_roundtrip_and_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    atomic_write_jsonl(path, [{"a": 1}, {"b": [1, 2]}])
    assert list(read_jsonl(path)) == [{"a": 1}, {"b": [1, 2]}]
    path.write_text(json.dumps({"a": 1}) + "\n{broken\n")
    with pytest.raises(ValueError, match=r"r\.jsonl:2: invalid JSON"):
        list(read_jsonl(path))


def test_written_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path: Path) -> None:
    import os
    import stat

    from agentic_kvc import io

    path = tmp_path / "REPORT.md"
    atomic_write_text(path, "x")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~io._UMASK
