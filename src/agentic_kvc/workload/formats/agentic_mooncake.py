"""Agentic Mooncake traces: Mooncake rows plus a workflow layer (subagents, joins, tool waits).

The format is NVIDIA Dynamo's agentic Mooncake replay row (`dynamo-data-gen`, crate
`dynamo_data_gen::mooncake::AgenticMooncakeRow`, Apache-2.0; docs.rs/dynamo-data-gen). One JSON
object a line:

- `request_id` names the row; `session_id` groups rows into a session (absent: a session of
  its own); rows of a session are its turns in file order;
- `input_length`, `output_length`, `hash_ids` as in Mooncake (aliases `input_tokens`,
  `output_tokens`), with one id per `block_tokens` prompt tokens;
- `wait_for`: request ids whose completions must arrive before the row is eligible; once they
  have, replay waits `delay` plus `tool_wait_ms` (ms) before sending it;
- `branches`: request ids this row spawns (the listed rows wait for it, as if they named it
  in `wait_for`);
- `timestamp` (ms, alias `created_time`): the open-loop start of a row with no dependency;
- `prefix_reset`, `tool_events`: read and counted, not replayed (the hash ids already say what
  the prompt shares).

Mapped onto the workload model: a row's own session's previous turn is the usual closed-loop
predecessor; every other dependency goes into `Request.depends_on` (a subagent's first row
waits for the parent turn that spawned it, a parent's join turn waits for each subagent's
last row). A session whose first row waits for another session's row is that session's
subagent (`Session.parent_session_id`). `think_s` is `delay + tool_wait_ms`.

Block size. Mooncake's FAST'25 traces use 512-token ids; Dynamo's exporters hash at the
engine's KV block (64 tokens by default in its mocker). An optional first line without
`request_id` is a header whose `block_size` (or `block_tokens`) gives it; otherwise
`block_tokens` (default 64).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats.common import (
    blocks_from_hash_ids,
    get_float,
    get_id_list,
    get_int,
    iter_json_lines,
)
from agentic_kvc.workload.model import Request, Session, Workload
from agentic_kvc.workload.timing import release_after

BLOCK_TOKENS = 64
KEYS = ("request_id", "wait_for")


def _first(obj: dict[str, Any], names: tuple[str, ...]) -> str:
    return next((n for n in names if n in obj), names[0])


def _id_list(obj: dict[str, Any], key: str, path: Path, line: int) -> list[str]:
    raw = obj.get(key) or []
    if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
        raise WorkloadFormatError(path, f"expected a list of request ids, got {raw!r}", line, key)
    return raw


def _ms(obj: dict[str, Any], names: tuple[str, ...], path: Path, line: int) -> float:
    key = _first(obj, names)
    if obj.get(key) is None:
        return 0.0
    return get_float(obj, key, path, line, minimum=0)


def read_agentic_mooncake(path: Path, *, block_tokens: int | None = None) -> Workload:
    rows: list[tuple[int, dict[str, Any]]] = []
    header: dict[str, Any] = {}
    for lineno, obj in iter_json_lines(path):
        if not rows and not header and "request_id" not in obj:
            header = obj
            continue
        rows.append((lineno, obj))
    if block_tokens is None:
        size = header.get("block_size", header.get("block_tokens", BLOCK_TOKENS))
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise WorkloadFormatError(
                path, f"expected a positive integer, got {size!r}", 1, "block_size"
            )
        block_tokens = size

    line_of: dict[str, int] = {}
    for lineno, obj in rows:
        rid = obj.get("request_id")
        if not isinstance(rid, str) or not rid:
            raise WorkloadFormatError(
                path, f"expected a non-empty string, got {rid!r}", lineno, "request_id"
            )
        if rid in line_of:
            raise WorkloadFormatError(
                path, f"{rid!r} already used on line {line_of[rid]}", lineno, "request_id"
            )
        line_of[rid] = lineno
        sid = obj.get("session_id")  # checked here: the dependency check below keys by it
        if sid is not None and (not isinstance(sid, str) or not sid):
            raise WorkloadFormatError(
                path, f"expected a non-empty string, got {sid!r}", lineno, "session_id"
            )
    # Everything a row waits for: its own wait_for, and the rows naming it in `branches`.
    waits: dict[str, list[str]] = {}
    for lineno, obj in rows:
        rid = obj["request_id"]
        for key in ("wait_for", "branches"):
            for other in _id_list(obj, key, path, lineno):
                if other not in line_of:
                    raise WorkloadFormatError(path, f"unknown request id {other!r}", lineno, key)
                child, parent = (rid, other) if key == "wait_for" else (other, rid)
                deps = waits.setdefault(child, [])
                if parent not in deps:
                    deps.append(parent)
    _check_acyclic(path, rows, waits, line_of)
    session_of = {obj["request_id"]: obj.get("session_id") or obj["request_id"] for _, obj in rows}

    t0 = min(
        (
            get_float(obj, _first(obj, ("timestamp", "created_time")), path, n)
            for n, obj in rows
            if obj.get(_first(obj, ("timestamp", "created_time"))) is not None
        ),
        default=0.0,
    )
    by_id: dict[str, Request] = {}
    sessions: dict[str, Session] = {}
    adjusted = resets = tool_events = 0
    for lineno, obj in rows:
        rid = obj["request_id"]
        sid = obj.get("session_id") or rid
        n_in = get_int(obj, _first(obj, ("input_length", "input_tokens")), path, lineno)
        n_out = get_int(obj, _first(obj, ("output_length", "output_tokens")), path, lineno)
        ids = get_id_list(obj, "hash_ids", path, lineno) if "hash_ids" in obj else []
        blocks, adj = blocks_from_hash_ids(ids, n_in, block_tokens, lineno)
        adjusted += adj
        resets += bool(obj.get("prefix_reset"))
        tool_events += len(obj.get("tool_events") or [])
        think = (
            _ms(obj, ("delay", "delay_ms"), path, lineno)
            + _ms(obj, ("tool_wait_ms",), path, lineno)
        ) / 1000.0
        sess = sessions.get(sid)
        prev = sess.requests[-1] if sess is not None else None
        deps = [d for d in waits.get(rid, []) if prev is None or d != prev.request_id]
        ts_key = _first(obj, ("timestamp", "created_time"))
        if obj.get(ts_key) is not None and not deps and prev is None:
            arrival = (get_float(obj, ts_key, path, lineno) - t0) / 1000.0
        else:
            after = [by_id[d] for d in deps if d in by_id] + ([prev] if prev else [])
            last = max(after, key=lambda r: r.arrival_s, default=None)
            arrival = release_after(last, think) if last is not None else 0.0
        req = Request(
            request_id=rid,
            session_id=sid,
            turn=len(sess.requests) if sess is not None else 0,
            input_tokens=n_in,
            output_tokens=n_out,
            blocks=blocks,
            arrival_s=arrival,
            think_s=think if (prev is not None or deps) else 0.0,
            parent_id=prev.request_id if prev is not None else (deps[0] if deps else None),
            depends_on=tuple(deps),
        )
        by_id[rid] = req
        if sess is None:
            parent_session = next((session_of[d] for d in deps if session_of[d] != sid), None)
            sess = sessions[sid] = Session(sid, [], parent_session)
        sess.requests.append(req)
    meta = {
        "format": "agentic-mooncake",
        "source": str(path),
        "block_tokens": block_tokens,
        "rows_with_adjusted_blocks": adjusted,
        "dependencies": sum(len(r.depends_on) for r in by_id.values()),
        "subagent_sessions": sum(s.parent_session_id is not None for s in sessions.values()),
        "prefix_resets": resets,
        "tool_events": tool_events,
    }
    return Workload(list(sessions.values()), meta=meta)


def _check_acyclic(
    path: Path,
    rows: list[tuple[int, dict[str, Any]]],
    waits: dict[str, list[str]],
    line_of: dict[str, int],
) -> None:
    """Dependencies, including each session's turn order, must form a DAG (else replay hangs)."""
    after: dict[str, list[str]] = {rid: list(deps) for rid, deps in waits.items()}
    last_of: dict[str, str] = {}
    for _lineno, obj in rows:
        rid, sid = obj["request_id"], obj.get("session_id") or obj["request_id"]
        if sid in last_of:
            after.setdefault(rid, []).append(last_of[sid])
        last_of[sid] = rid
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in line_of:
        if state.get(start):
            continue
        stack = [(start, iter(after.get(start, ())))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise WorkloadFormatError(
                    path, f"dependency cycle through {nxt!r}", line_of[node], "wait_for"
                )
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(after.get(nxt, ()))))
