"""Trace readers by format name, and format auto-detection from a file's first line.

| name | file | sessions | prefix content |
|---|---|---|---|
| native | akvc-workload jsonl (generator, `workload convert`) | explicit | blocks |
| mooncake | Mooncake FAST'25 jsonl | rebuilt from hash chains | 512-token hash ids |
| mooncake-64 | Mooncake rows hashed at 64-token blocks | rebuilt from hash chains | 64-token ids |
| agentic-mooncake | Dynamo agentic Mooncake jsonl | `wait_for`/`branches` DAG | 64-token ids |
| bailian | Alibaba Bailian jsonl | `parent_chat_id` links | 16-token hash ids |
| tracelab | TraceLab closed-loop CSV | `session_id` / `round_idx` | prefix + new lengths |
| tracelab-rounds | TraceLab round jsonl | `session_id` / `round_index` | prefix + new lengths |
| azure | Azure LLM inference CSV | none (one request each) | none |
"""

from __future__ import annotations

import csv
import gzip
import json
import zlib
from collections.abc import Callable
from pathlib import Path

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats.agentic_mooncake import read_agentic_mooncake
from agentic_kvc.workload.formats.azure import read_azure
from agentic_kvc.workload.formats.bailian import read_bailian
from agentic_kvc.workload.formats.common import UTF8_BOM, open_trace
from agentic_kvc.workload.formats.mooncake import read_mooncake
from agentic_kvc.workload.formats.native import is_native_header, read_native, write_native
from agentic_kvc.workload.formats.tracelab import read_tracelab_csv, read_tracelab_rounds
from agentic_kvc.workload.model import Workload

READERS: dict[str, Callable[[Path], Workload]] = {
    "native": read_native,
    "mooncake": read_mooncake,
    "mooncake-64": lambda p: read_mooncake(p, block_tokens=64),
    "agentic-mooncake": read_agentic_mooncake,
    "bailian": read_bailian,
    "tracelab": read_tracelab_csv,
    "tracelab-rounds": read_tracelab_rounds,
    "azure": read_azure,
}
FORMATS = ("auto", *READERS)


def _first_line(path: Path) -> str:
    try:
        with open_trace(path) as fh:
            for lineno, raw in enumerate(fh, 1):
                if lineno == 1:
                    raw = raw.removeprefix(UTF8_BOM)
                if raw.strip():
                    return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise WorkloadFormatError(
            path, "not UTF-8 text (a binary file, or compressed other than gzip)", 1
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise WorkloadFormatError(path, f"not a readable gzip file: {exc}") from None
    raise WorkloadFormatError(path, "empty file")


def detect_format(path: str | Path) -> str:
    """The format name of `path`, judged by its first non-empty line."""
    path = Path(path)
    line = _first_line(path)
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadFormatError(path, f"invalid JSON: {exc.msg}", 1) from None
        keys = set(obj) if isinstance(obj, dict) else set()
        if is_native_header(obj):
            return "native"
        if "request_id" in keys and keys & {"wait_for", "branches", "tool_wait_ms", "session_id"}:
            return "agentic-mooncake"
        if not keys & {"request_id", "input_length", "format"} and keys & {"block_size", "schema"}:
            return "agentic-mooncake"  # its optional header line
        if {"chat_id", "parent_chat_id"} <= keys:
            return "bailian"
        if {"timestamp", "input_length", "hash_ids"} <= keys:
            return "mooncake"
        if {"round_index", "prefix_tokens", "newly_append_tokens"} <= keys:
            return "tracelab-rounds"
        raise WorkloadFormatError(
            path,
            f"cannot tell the format from keys {sorted(keys)}; pass a format, one of "
            f"{', '.join(READERS)}",
            1,
        )
    try:
        header = {h.strip() for h in next(csv.reader([line]))}
    except csv.Error as exc:  # e.g. a stray carriage return: not a CSV header
        raise WorkloadFormatError(path, f"first line is neither JSON nor CSV: {exc}", 1) from None
    if {"session_id", "round_idx", "prefix_len"} <= header:
        return "tracelab"
    if {"ContextTokens", "GeneratedTokens"} <= header:
        return "azure"
    raise WorkloadFormatError(
        path,
        f"cannot tell the format from header {sorted(header)}; pass a format, one of "
        f"{', '.join(READERS)}",
        1,
    )


def read_workload(path: str | Path, fmt: str = "auto") -> Workload:
    """Read a trace or native workload file; `fmt` "auto" detects it from the first line."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadFormatError(path, "no such file")
    if fmt == "auto":
        fmt = detect_format(path)
    reader = READERS.get(fmt)
    if reader is None:
        raise WorkloadFormatError(path, f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    return reader(path)


__all__ = ["FORMATS", "READERS", "detect_format", "read_workload", "write_native"]
