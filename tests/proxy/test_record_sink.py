"""The proxy's record sink writes one JSON line per record, every field in order (None as
null), the bytes `msgspec` gives for `dataclasses.asdict` of the record."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import msgspec

from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.proxy.records import RecordSink


def _records() -> list[RequestRecord]:
    a = RequestRecord("r1", "s1", 0, 0.5, 1000, output_tokens=4, cached_tokens=512)
    a.t_proxy_recv, a.t_first_token, a.t_done = 1.0, 1.25, 1.5
    a.itl_s = [0.01, 0.02]
    a.scores = {0: {"load": 1.0, "hit": 0.5}, 1: {"rho": [0.1, 0.2], "pair": (1, 2)}}
    b = RequestRecord("r2", "s1", 1, 2.0, 1500, error="upstream 503", host_tokens=256)
    b.session_source = "header:x-session-id"
    return [a, b]


def test_flush_writes_each_record_as_asdict_would(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    seen: list[dict] = []
    sink = RecordSink(path, on_record=seen.append)
    for r in _records():
        sink.add(r)
    sink.flush()
    sink.add(RequestRecord("r3", "s2", 0, 3.0, 10))  # appended by a second flush
    sink.flush()
    lines = path.read_bytes().splitlines()
    # `add` finalizes (derived latencies); the expected rows get the same.
    expected = [*_records(), RequestRecord("r3", "s2", 0, 3.0, 10)]
    assert lines == [msgspec.json.encode(asdict(r.finalize())) for r in expected]
    rows = [json.loads(x) for x in lines]
    assert rows[0]["ttft_s"] == 0.25 and rows[0]["scores"]["1"]["pair"] == [1, 2]
    assert rows[1]["host_tokens"] == 256 and rows[0]["host_tokens"] is None  # null, not left out
    assert sink.written == 3
    # The hook gets the record's dict form (fields that are None and written only when set
    # are left out there, as in a run's requests.jsonl).
    assert "host_tokens" not in seen[0] and seen[1]["host_tokens"] == 256


def test_a_path_that_cannot_be_written_fails_at_start(tmp_path: Path) -> None:
    import pytest

    from agentic_kvc.proxy.records import RecordPathError

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RecordPathError, match=r"cannot write records to .*file/x\.jsonl"):
        RecordSink(blocker / "x.jsonl")  # its folder would be a file


def test_a_failed_write_keeps_its_records_for_the_next_flush(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "records.jsonl"
    sink = RecordSink(path, max_buffer=2)
    real_open = Path.open
    broken = {"on": True}

    def open_(self: Path, mode: str = "r", *a, **k):  # type: ignore[no-untyped-def]
        if broken["on"] and self == path and "a" in mode:
            raise OSError(28, "No space left on device")
        return real_open(self, mode, *a, **k)

    monkeypatch.setattr(Path, "open", open_)
    a, b = _records()
    sink.add(a)
    sink.add(b)  # reaches max_buffer: the flush fails, both are kept
    assert sink.failing and sink.written == 0 and path.read_bytes() == b""
    sink.add(RequestRecord("r3", "s2", 0, 3.0, 10))  # no write attempt per request meanwhile
    broken["on"] = False
    sink.flush()
    assert not sink.failing and sink.written == 3
    assert [json.loads(x)["request_id"] for x in path.read_bytes().splitlines()] == [
        "r1",
        "r2",
        "r3",
    ]


def test_a_short_write_is_cut_off_so_the_retry_repeats_nothing(tmp_path: Path, monkeypatch) -> None:
    """A disk that fills mid-write leaves part of the data; the retry writes every record once,
    whole, after the lines written before."""
    path = tmp_path / "records.jsonl"
    sink = RecordSink(path)
    a, b = _records()
    sink.add(a)
    sink.flush()  # one good line first
    real_open = Path.open
    broken = {"on": True}

    class Short:
        def __init__(self, fh):  # type: ignore[no-untyped-def]
            self.fh = fh

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            self.fh.close()

        def tell(self) -> int:
            return self.fh.tell()

        def write(self, data: bytes) -> None:
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            raise OSError(28, "No space left on device")

    def open_(self: Path, mode: str = "r", *a, **k):  # type: ignore[no-untyped-def]
        fh = real_open(self, mode, *a, **k)
        return Short(fh) if broken["on"] and self == path and "a" in mode else fh

    monkeypatch.setattr(Path, "open", open_)
    sink.add(b)
    sink.add(RequestRecord("r3", "s2", 0, 3.0, 10))
    sink.flush()
    assert sink.failing and sink.written == 1
    assert len(path.read_bytes().splitlines()) == 1  # the half-written part is gone
    broken["on"] = False
    sink.flush()
    ids = [json.loads(x)["request_id"] for x in path.read_bytes().splitlines()]
    assert ids == ["r1", "r2", "r3"] and sink.written == 3
