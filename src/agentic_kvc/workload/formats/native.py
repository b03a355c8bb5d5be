"""The workbench's own workload format: what the generator and `workload convert` write.

JSON lines. Line 1 is a header `{"format": "akvc-workload", "version": 1, "meta": {...}}`;
every other line is one request: `request_id, session_id, turn, arrival_s, think_s,
input_tokens, output_tokens, parent_id, blocks` with `blocks` a list of `[id, tokens]` pairs,
plus, only when set, `depends_on` (request ids of other sessions that must finish first) and
`parent_session_id` (a subagent session's spawner).
Sessions appear in order, each with its requests in turn order. Keys are sorted and floats are
written with Python's shortest round-trip repr, so reading a file and writing it again gives
the same bytes, and the same workload gives the same file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.io import atomic_write_text, dumps_canonical
from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats.common import get_float, get_int, iter_json_lines
from agentic_kvc.workload.model import Block, Request, Session, Workload

MAGIC = "akvc-workload"
VERSION = 1


def _request_row(r: Request, parent_session: str | None = None) -> dict[str, Any]:
    row = {
        "request_id": r.request_id,
        "session_id": r.session_id,
        "turn": r.turn,
        "arrival_s": r.arrival_s,
        "think_s": r.think_s,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "parent_id": r.parent_id,
        "blocks": [[b.id, b.tokens] for b in r.blocks],
    }
    # DAG fields only when set, so a workload without them keeps its bytes.
    if r.depends_on:
        row["depends_on"] = list(r.depends_on)
    if parent_session is not None:
        row["parent_session_id"] = parent_session
    return row


def dumps_native(workload: Workload) -> str:
    header = {"format": MAGIC, "version": VERSION, "meta": workload.meta}
    lines = [dumps_canonical(header)]
    lines.extend(
        dumps_canonical(_request_row(r, s.parent_session_id))
        for s in workload.sessions
        for r in s.requests
    )
    return "\n".join(lines) + "\n"


def write_native(workload: Workload, path: str | Path) -> None:
    atomic_write_text(path, dumps_native(workload))


def is_native_header(obj: dict[str, Any]) -> bool:
    return obj.get("format") == MAGIC


def _str(obj: dict[str, Any], key: str, path: Path, line: int, *, optional: bool = False) -> Any:
    if key not in obj:
        raise WorkloadFormatError(path, "missing", line, key)
    value = obj[key]
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise WorkloadFormatError(path, f"expected a non-empty string, got {value!r}", line, key)
    return value


def _blocks(obj: dict[str, Any], path: Path, line: int) -> tuple[Block, ...]:
    raw = obj.get("blocks")
    if not isinstance(raw, list):
        raise WorkloadFormatError(path, "expected a list of [id, tokens] pairs", line, "blocks")
    out = []
    for i, pair in enumerate(raw):
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
            and 0 <= pair[0] < 1 << 64
            and pair[1] >= 1
        )
        if not ok:
            raise WorkloadFormatError(
                path, f"expected [id >= 0, tokens >= 1], got {pair!r}", line, f"blocks[{i}]"
            )
        out.append(Block(pair[0], pair[1]))
    return tuple(out)


def _depends_on(obj: dict[str, Any], path: Path, line: int) -> tuple[str, ...]:
    raw = obj.get("depends_on", [])
    if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
        raise WorkloadFormatError(
            path, f"expected a list of request ids, got {raw!r}", line, "depends_on"
        )
    return tuple(raw)


def read_native(path: Path) -> Workload:
    sessions: list[Session] = []
    by_id: dict[str, Session] = {}
    meta: dict[str, Any] | None = None
    for lineno, obj in iter_json_lines(path):
        if meta is None:
            if not is_native_header(obj):
                raise WorkloadFormatError(path, f"first line must be the {MAGIC} header", lineno)
            if obj.get("version") != VERSION:
                raise WorkloadFormatError(
                    path, f"unsupported version {obj.get('version')!r}", lineno, "version"
                )
            meta = obj.get("meta") or {}
            if not isinstance(meta, dict):
                raise WorkloadFormatError(path, "expected an object", lineno, "meta")
            continue
        blocks = _blocks(obj, path, lineno)
        n_in = get_int(obj, "input_tokens", path, lineno)
        if blocks and sum(b.tokens for b in blocks) != n_in:
            raise WorkloadFormatError(
                path,
                f"{n_in} but blocks hold {sum(b.tokens for b in blocks)} tokens",
                lineno,
                "input_tokens",
            )
        req = Request(
            request_id=_str(obj, "request_id", path, lineno),
            session_id=_str(obj, "session_id", path, lineno),
            turn=get_int(obj, "turn", path, lineno),
            input_tokens=n_in,
            output_tokens=get_int(obj, "output_tokens", path, lineno),
            blocks=blocks,
            arrival_s=get_float(obj, "arrival_s", path, lineno),
            think_s=get_float(obj, "think_s", path, lineno, minimum=0),
            parent_id=_str(obj, "parent_id", path, lineno, optional=True),
            depends_on=_depends_on(obj, path, lineno),
        )
        # Floats must come back as they were written (ints in JSON would turn 1.0 into 1).
        req.arrival_s, req.think_s = float(obj["arrival_s"]), float(obj["think_s"])
        sess = by_id.get(req.session_id)
        parent_session = (
            _str(obj, "parent_session_id", path, lineno) if "parent_session_id" in obj else None
        )
        if sess is None:
            sess = by_id[req.session_id] = Session(req.session_id, [], parent_session)
            sessions.append(sess)
        elif sess.requests[-1].turn >= req.turn:
            raise WorkloadFormatError(
                path,
                f"turn {req.turn} after turn {sess.requests[-1].turn} of session {req.session_id}",
                lineno,
                "turn",
            )
        sess.requests.append(req)
    if meta is None:
        raise WorkloadFormatError(path, "empty file: no header line", 1)
    return Workload(sessions, meta=meta)
