"""TraceLab agentic traces (uw-syfi/TraceLab, CC-BY-4.0): closed-loop CSV and round jsonl.

*Closed-loop replay CSV*: `session_id, arrival_time, round_idx, prefix_len, input_len,
output_len, tool_wait_after_ms`. `arrival_time` (ms) is the session's start and repeats on
every row; round r's prompt is `prefix_len` tokens of context (the previous rounds' prompts and
answers) followed by `input_len` new tokens; after the round's answer the agent waits
`tool_wait_after_ms` before the next round. Rows of a session need not be contiguous.

*Round jsonl* (sanitized Claude Code / Codex sessions): one object per model round with
`session_id`, `round_index`, `prefix_tokens` (cached prefix), `newly_append_tokens`,
`output_tokens` and `timing_events` (ISO timestamps). The round arrives at its first event;
its think time is the gap from the previous round's last event.

Both become blocks the same way: a session's context is its rounds' prompt and answer
segments, one block each; a round's prompt is the first `prefix` tokens of the context so far
(cut inside a block when the agent dropped or rewrote history) plus one new block. Answers are
synthesized content, so on a real engine they are prefilled (not reused) in the next round,
unlike the model's actual generated tokens; stats count them as new tokens too.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats.common import (
    get_float,
    get_int,
    iter_csv_rows,
    iter_json_lines,
    prefix_blocks,
)
from agentic_kvc.workload.model import Block, Request, Session, Workload
from agentic_kvc.workload.timing import release_after

CSV_COLUMNS = (
    "session_id",
    "arrival_time",
    "round_idx",
    "prefix_len",
    "input_len",
    "output_len",
    "tool_wait_after_ms",
)
ROUND_KEYS = ("session_id", "round_index", "prefix_tokens", "newly_append_tokens")


class _ContextBuilder:
    """Block ids for one trace: a session's growing context as a list of segment blocks."""

    def __init__(self) -> None:
        self.next_id = 1
        self.padded = 0

    def new_block(self, tokens: int) -> Block:
        b = Block(self.next_id, tokens)
        self.next_id += 1
        return b

    def prompt(self, context: list[Block], prefix: int, new: int) -> tuple[Block, ...]:
        known = sum(b.tokens for b in context)
        blocks = prefix_blocks(context, prefix)
        if prefix > known:  # context the trace did not show us (e.g. history before round 0)
            self.padded += 1
            blocks.append(self.new_block(prefix - known))
        if new > 0:
            blocks.append(self.new_block(new))
        return tuple(blocks)


def read_tracelab_csv(path: Path) -> Workload:
    rows: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for lineno, row in iter_csv_rows(path, CSV_COLUMNS):
        sid = (row.get("session_id") or "").strip()
        if not sid:
            raise WorkloadFormatError(path, "empty", lineno, "session_id")
        rnd = get_int(row, "round_idx", path, lineno)
        rows[sid].append((rnd, lineno, row))
    builder = _ContextBuilder()
    sessions: list[Session] = []
    for sid, items in rows.items():
        items.sort(key=lambda x: x[0])
        context: list[Block] = []
        reqs: list[Request] = []
        prev_wait = 0.0
        for turn, (rnd, lineno, row) in enumerate(items):
            if turn and rnd == items[turn - 1][0]:
                raise WorkloadFormatError(path, f"round {rnd} repeats in session {sid}", lineno)
            start = get_float(row, "arrival_time", path, lineno, minimum=0) / 1000.0
            prefix = get_int(row, "prefix_len", path, lineno)
            n_new = get_int(row, "input_len", path, lineno)
            n_out = get_int(row, "output_len", path, lineno)
            wait = get_float(row, "tool_wait_after_ms", path, lineno, minimum=0) / 1000.0
            blocks = builder.prompt(context, prefix, n_new)
            n_in = sum(b.tokens for b in blocks)
            prev = reqs[-1] if reqs else None
            reqs.append(
                Request(
                    request_id=f"{sid}/{rnd}",
                    session_id=str(sid),
                    turn=turn,
                    input_tokens=n_in,
                    output_tokens=n_out,
                    blocks=blocks,
                    arrival_s=start if prev is None else release_after(prev, prev_wait),
                    think_s=0.0 if prev is None else prev_wait,
                    parent_id=None if prev is None else prev.request_id,
                )
            )
            context = [*blocks, builder.new_block(n_out)] if n_out else list(blocks)
            prev_wait = wait
        sessions.append(Session(str(sid), reqs))
    return _finish(sessions, "tracelab", path, builder)


def _parse_ts(value: Any, path: Path, line: int, field: str) -> float:
    if not isinstance(value, str):
        raise WorkloadFormatError(path, f"expected an ISO timestamp, got {value!r}", line, field)
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise WorkloadFormatError(path, f"not an ISO timestamp: {value!r}", line, field) from None


def read_tracelab_rounds(path: Path) -> Workload:
    by_session: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for lineno, obj in iter_json_lines(path):
        for key in ROUND_KEYS:
            if key not in obj:
                raise WorkloadFormatError(path, "missing", lineno, key)
        rnd = get_int(obj, "round_index", path, lineno)
        by_session[str(obj["session_id"])].append((rnd, lineno, obj))
    builder = _ContextBuilder()
    sessions: list[Session] = []
    t0: float | None = None
    raw: list[tuple[str, list[tuple[int, int, dict[str, Any], float, float]]]] = []
    for sid, items in by_session.items():
        items.sort(key=lambda x: x[0])
        timed = []
        for rnd, lineno, obj in items:
            events = obj.get("timing_events") or []
            if not isinstance(events, list) or not events:
                raise WorkloadFormatError(
                    path, "expected a non-empty list", lineno, "timing_events"
                )
            times = [
                _parse_ts(
                    e.get("timestamp") if isinstance(e, dict) else e,
                    path,
                    lineno,
                    "timing_events.timestamp",
                )
                for e in events
            ]
            timed.append((rnd, lineno, obj, min(times), max(times)))
            t0 = min(times) if t0 is None else min(t0, min(times))
        raw.append((sid, timed))
    for sid, timed in raw:
        context: list[Block] = []
        reqs: list[Request] = []
        for turn, (rnd, lineno, obj, first, _last) in enumerate(timed):
            prefix = get_int(obj, "prefix_tokens", path, lineno)
            n_new = get_int(obj, "newly_append_tokens", path, lineno)
            n_out = get_int(obj, "output_tokens", path, lineno) if obj.get("output_tokens") else 0
            blocks = builder.prompt(context, prefix, n_new)
            prev = reqs[-1] if reqs else None
            arrival = first - (t0 or 0.0)
            think = max(0.0, first - timed[turn - 1][4]) if prev is not None else 0.0
            reqs.append(
                Request(
                    request_id=f"{sid}/{rnd}",
                    session_id=sid,
                    turn=turn,
                    input_tokens=sum(b.tokens for b in blocks),
                    output_tokens=n_out,
                    blocks=blocks,
                    arrival_s=arrival,
                    think_s=think,
                    parent_id=None if prev is None else prev.request_id,
                )
            )
            context = [*blocks, builder.new_block(n_out)] if n_out else list(blocks)
        sessions.append(Session(sid, reqs))
    sessions.sort(key=lambda s: (s.start_s, s.session_id))
    return _finish(sessions, "tracelab-rounds", path, builder)


def _finish(sessions: list[Session], fmt: str, path: Path, builder: _ContextBuilder) -> Workload:
    sessions.sort(key=lambda s: (s.start_s, s.session_id))
    return Workload(
        sessions,
        meta={"format": fmt, "source": str(path), "rounds_with_unseen_prefix": builder.padded},
    )
