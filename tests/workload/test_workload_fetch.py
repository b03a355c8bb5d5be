"""Fetching public traces: local copies are sha256-checked; a mismatch leaves nothing behind."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agentic_kvc.io import sha256_file
from agentic_kvc.workload import fetch
from agentic_kvc.workload.fetch import PublicTrace, TraceFetchError, fetch_trace


def _register(monkeypatch: pytest.MonkeyPatch, data: bytes, sha: str | None = None) -> None:
    spec = PublicTrace("toy.jsonl", sha or hashlib.sha256(data).hexdigest(), None, "test")
    monkeypatch.setitem(fetch.PUBLIC_TRACES, "toy", spec)


def test_local_copy_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n'
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "toy.jsonl").write_bytes(data)
    _register(monkeypatch, data)
    out = tmp_path / "results" / "traces" / "toy.jsonl"
    assert fetch_trace("toy", out, [tmp_path / "src"]) == str(tmp_path / "src" / "toy.jsonl")
    assert out.read_bytes() == data


def test_sha_mismatch_and_missing_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "toy.jsonl").write_bytes(b"tampered\n")
    _register(monkeypatch, b"", sha="0" * 64)
    out = tmp_path / "out" / "toy.jsonl"
    with pytest.raises(TraceFetchError, match="does not match"):
        fetch_trace("toy", out, [tmp_path])
    assert not out.exists() and list(out.parent.iterdir()) == []
    monkeypatch.delenv("AKVC_TRACES_DIR", raising=False)
    with pytest.raises(TraceFetchError, match="no upstream URL"):
        fetch_trace("toy", out, [])
    with pytest.raises(TraceFetchError, match="unknown trace"):
        fetch_trace("nope", out, [])


def test_recorded_checksums_match_shared_copies(shared_traces: Path) -> None:
    for spec in fetch.PUBLIC_TRACES.values():
        local = shared_traces / spec.file_name
        if local.is_file():
            assert sha256_file(local) == spec.sha256


def test_download_from_url_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No local copy: the upstream URL is read (file:// here, https upstream) and checked."""
    data = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,2\n"
    upstream = tmp_path / "upstream.csv"
    upstream.write_bytes(data)
    spec = PublicTrace("toy.csv", hashlib.sha256(data).hexdigest(), upstream.as_uri(), "test")
    monkeypatch.setitem(fetch.PUBLIC_TRACES, "toy", spec)
    monkeypatch.delenv("AKVC_TRACES_DIR", raising=False)
    out = tmp_path / "traces" / "toy.csv"
    assert fetch_trace("toy", out, [tmp_path / "empty"]) == upstream.as_uri()
    assert out.read_bytes() == data
    upstream.write_bytes(data + b"2023-11-16 18:15:47.1,11,2\n")  # upstream changed
    out.unlink()
    with pytest.raises(TraceFetchError, match="does not match"):
        fetch_trace("toy", out, [])
    assert not out.exists()


def test_every_public_trace_is_pinned_and_credited() -> None:
    for name, spec in fetch.PUBLIC_TRACES.items():
        assert len(spec.sha256) == 64 and int(spec.sha256, 16) >= 0, name
        assert spec.url is None or spec.url.startswith("https://"), name
        assert spec.credit and any(lic in spec.credit for lic in ("Apache-2.0", "CC-BY-4.0"))
