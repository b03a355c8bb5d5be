"""A trace saved with a UTF-8 byte-order mark (Windows editors, spreadsheets' "CSV UTF-8") reads
as the same trace without it, for JSON-lines and CSV formats, auto-detected or named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_kvc.workload import detect_format, read_workload

BOM = b"\xef\xbb\xbf"
MOONCAKE = "".join(
    json.dumps({"timestamp": 1000 * i, "input_length": 600, "output_length": 8, "hash_ids": [0, i]})
    + "\n"
    for i in range(1, 4)
)
TRACELAB = (
    "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
    "0,117,0,0,2318,200,300\n"
    "0,117,1,2518,348,131,154\n"
)


@pytest.mark.parametrize(("text", "fmt"), [(MOONCAKE, "mooncake"), (TRACELAB, "tracelab")])
def test_a_leading_bom_changes_nothing(tmp_path: Path, text: str, fmt: str) -> None:
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    plain.write_bytes(text.encode())
    marked.write_bytes(BOM + text.encode())
    assert detect_format(marked) == detect_format(plain) == fmt
    for how in ("auto", fmt):
        a, b = read_workload(plain, how), read_workload(marked, how)
        assert len(b) == len(a) > 0
        assert [(r.arrival_s, r.input_tokens) for r in b.requests()] == [
            (r.arrival_s, r.input_tokens) for r in a.requests()
        ]
