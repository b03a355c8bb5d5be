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
