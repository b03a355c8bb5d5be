"""Helpers shared by the trace readers: typed field access with located errors, block lists."""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.model import Block

# Ids for blocks a reader has to invent (a row whose hash ids do not cover its input). Far
# above any id a trace uses, and still a valid unsigned 64-bit value for the hashers.
SYNTHETIC_BLOCK_BASE = 1 << 62


# A UTF-8 byte-order mark, which editors and spreadsheets on Windows put at a file's start
# (`json.loads` of bytes skips it by itself; format detection and CSV do not).
UTF8_BOM = b"\xef\xbb\xbf"


GZIP_MAGIC = b"\x1f\x8b"


def open_trace(path: Path) -> IO[bytes]:
    """A trace file's bytes, decompressed when it is gzip (public traces often ship as
    `.jsonl.gz` / `.csv.gz`): recognised by its first two bytes, not its name."""
    with path.open("rb") as fh:
        gz = fh.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if gz else path.open("rb")


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-empty line; a bad line names its number."""
    with _bad_gzip(path), open_trace(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise WorkloadFormatError(path, f"invalid JSON: {exc.msg}", lineno) from None
            except UnicodeDecodeError as exc:
                raise WorkloadFormatError(path, f"not UTF-8 text: {exc.reason}", lineno) from None
            if not isinstance(obj, dict):
                raise WorkloadFormatError(path, "expected a JSON object", lineno)
            yield lineno, obj


def iter_csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data row; missing columns are reported once, up front."""
    try:
        with _bad_gzip(path):
            yield from _csv_rows(path, required)
    except (UnicodeDecodeError, csv.Error) as exc:  # not text, or a NUL / stray quote
        raise WorkloadFormatError(path, f"not a readable CSV file: {exc}") from None


@contextmanager
def _bad_gzip(path: Path) -> Iterator[None]:
    """A truncated or corrupt gzip trace as a WorkloadFormatError naming the file."""
    try:
        yield
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise WorkloadFormatError(path, f"not a readable gzip file: {exc}") from None


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    # utf-8-sig: a leading byte-order mark goes (spreadsheets' "CSV UTF-8" writes one)
    with io.TextIOWrapper(open_trace(path), encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        missing = [c for c in required if c not in header]
        if missing:
            raise WorkloadFormatError(
                path, f"missing column(s) {', '.join(missing)}; header is {header}", 1
            )
        for row in reader:
            # DictReader counts physical lines; its line_num is the line just read.
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            yield reader.line_num, row


def _number(obj: dict[str, Any], key: str, path: Path, line: int, kind: str) -> int | float:
    """The finite number under `key` (numeric strings accepted, as CSV cells are strings)."""
    if key not in obj:
        raise WorkloadFormatError(path, "missing", line, key)
    value = obj[key]
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise WorkloadFormatError(path, f"not a number: {value!r}", line, key) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadFormatError(path, f"expected {kind}, got {value!r}", line, key)
    if value != value or value in (float("inf"), float("-inf")):
        raise WorkloadFormatError(path, f"expected {kind}, got {value!r}", line, key)
    return value


def _at_least(value: float, minimum: float | None, key: str, path: Path, line: int) -> None:
    if minimum is not None and value < minimum:
        raise WorkloadFormatError(path, f"must be >= {minimum}, got {value!r}", line, key)


def get_int(
    obj: dict[str, Any], key: str, path: Path, line: int, *, minimum: int | None = 0
) -> int:
    value = _number(obj, key, path, line, "an integer")
    if int(value) != value:
        raise WorkloadFormatError(path, f"expected an integer, got {obj[key]!r}", line, key)
    _at_least(value, minimum, key, path, line)
    return int(value)


def get_float(
    obj: dict[str, Any], key: str, path: Path, line: int, *, minimum: float | None = None
) -> float:
    value = _number(obj, key, path, line, "a finite number")
    _at_least(value, minimum, key, path, line)
    return float(value)


def get_id_list(obj: dict[str, Any], key: str, path: Path, line: int) -> list[int]:
    if key not in obj:
        raise WorkloadFormatError(path, "missing", line, key)
    ids = obj[key]
    if not isinstance(ids, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 64 for x in ids
    ):
        raise WorkloadFormatError(
            path, "expected a list of non-negative 64-bit integer block ids", line, key
        )
    return ids


def blocks_from_hash_ids(
    ids: list[int], input_tokens: int, block_tokens: int, line: int
) -> tuple[tuple[Block, ...], bool]:
    """Content blocks for a row of fixed-size hash ids: full blocks and a partial last one.

    Traces state `len(hash_ids) == ceil(input / block_tokens)`; when a row does not, the ids
    that would hold no token are dropped, and tokens beyond the ids go to a block unique to
    this row (it cannot be shared: nothing says what it holds). Returns (blocks, adjusted).
    """
    if input_tokens == 0:
        return (), bool(ids)
    needed = -(-input_tokens // block_tokens)
    adjusted = len(ids) != needed
    use = ids[:needed]
    blocks = [Block(b, block_tokens) for b in use]
    covered = len(use) * block_tokens
    if covered >= input_tokens:
        last = blocks[-1]
        blocks[-1] = Block(last.id, input_tokens - block_tokens * (len(use) - 1))
    else:
        blocks.append(Block(SYNTHETIC_BLOCK_BASE + line, input_tokens - covered))
    return tuple(blocks), adjusted


def prefix_blocks(blocks: tuple[Block, ...] | list[Block], n: int) -> list[Block]:
    """The leading blocks holding exactly the first `n` tokens (the last one may be cut).

    A cut block keeps its id: token k of a block depends only on (id, k), so the shortened
    block is a true prefix of the full one.
    """
    out: list[Block] = []
    left = n
    for b in blocks:
        if left <= 0:
            break
        out.append(b if b.tokens <= left else Block(b.id, left))
        left -= out[-1].tokens
    return out
