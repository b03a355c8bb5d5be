"""How a trace file is stored does not change what is read: a UTF-8 byte-order mark (Windows
editors, spreadsheets' "CSV UTF-8") or gzip compression (public traces ship as `.jsonl.gz`)
give the same trace as the plain file, for JSON-lines and CSV formats, auto-detected or named;
a truncated gzip or a binary file is an error naming the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from agentic_kvc.workload import detect_format, read_workload
from agentic_kvc.workload.errors import WorkloadFormatError

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
@pytest.mark.parametrize("stored", ["bom", "gzip", "gzip+bom"])
def test_the_stored_form_changes_nothing(tmp_path: Path, text: str, fmt: str, stored: str) -> None:
    plain, other = tmp_path / "plain", tmp_path / "other"
    plain.write_bytes(text.encode())
    data = (BOM if "bom" in stored else b"") + text.encode()
    other.write_bytes(gzip.compress(data) if "gzip" in stored else data)
    assert detect_format(other) == detect_format(plain) == fmt
    for how in ("auto", fmt):
        a, b = read_workload(plain, how), read_workload(other, how)
        assert len(b) == len(a) > 0
        assert [(r.arrival_s, r.input_tokens) for r in b.requests()] == [
            (r.arrival_s, r.input_tokens) for r in a.requests()
        ]


@pytest.mark.parametrize(("text", "fmt"), [(MOONCAKE, "mooncake"), (TRACELAB, "tracelab")])
def test_a_truncated_gzip_is_an_error_naming_the_file(tmp_path: Path, text: str, fmt: str) -> None:
    path = tmp_path / "cut.gz"
    head, *rows = text.splitlines(keepends=True)
    if fmt == "mooncake":  # no header line
        head, rows = "", [head, *rows]
    path.write_bytes(gzip.compress((head + "".join(rows) * 50).encode())[:-30])
    with pytest.raises(WorkloadFormatError, match=r"cut\.gz: not a readable gzip file"):
        read_workload(path, fmt)


def test_a_binary_file_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(WorkloadFormatError, match=r"blob\.bin:1: not UTF-8 text"):
        read_workload(path)
