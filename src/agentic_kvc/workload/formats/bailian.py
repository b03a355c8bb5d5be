"""Alibaba Bailian usage traces (alibaba-edu/qwen-bailian-usagetraces-anon, Apache-2.0).

Format: one JSON object a line: `chat_id`, `parent_chat_id` (-1 for a conversation's first
request), `timestamp` (s), `input_length`, `output_length`, `type` (text/search/image/file),
`turn` (1-based), `hash_ids` (salted SipHash ids of 16-token blocks). Two hours of a Qwen
serving instance on Aliyun Bailian; see Wang et al., "KVCache Cache in the Wild" (ATC 2025).

Sessions follow the parent links: a request whose parent is the last request of a session
joins it; a second child of an older request (a regenerated answer, a branch) starts a new
session that keeps its `parent_id`; a parent missing from the file (a cut trace) makes a root.
"""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats.common import (
    blocks_from_hash_ids,
    get_float,
    get_id_list,
    get_int,
    iter_json_lines,
)
from agentic_kvc.workload.model import Request, Session, Workload

BLOCK_TOKENS = 16
KEYS = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length")


def read_bailian(path: Path, *, block_tokens: int = BLOCK_TOKENS) -> Workload:
    rows = []
    seen: set[int] = set()
    adjusted = 0
    for lineno, obj in iter_json_lines(path):
        chat = get_int(obj, "chat_id", path, lineno, minimum=None)
        if chat in seen:
            raise WorkloadFormatError(path, f"duplicate chat_id {chat}", lineno, "chat_id")
        seen.add(chat)
        parent = get_int(obj, "parent_chat_id", path, lineno, minimum=-1)
        ts = get_float(obj, "timestamp", path, lineno, minimum=0)
        n_in = get_int(obj, "input_length", path, lineno)
        n_out = get_int(obj, "output_length", path, lineno)
        ids = get_id_list(obj, "hash_ids", path, lineno) if "hash_ids" in obj else []
        blocks, adj = blocks_from_hash_ids(ids, n_in, block_tokens, lineno)
        adjusted += adj
        rows.append((ts, lineno, chat, parent, n_in, n_out, blocks))
    rows.sort(key=lambda r: (r[0], r[1]))
    t0 = rows[0][0] if rows else 0.0
    by_chat: dict[int, Request] = {}
    session_of: dict[int, list[Request]] = {}
    sessions: list[list[Request]] = []
    orphans = forks = 0
    for ts, _lineno, chat, parent, n_in, n_out, blocks in rows:
        par = by_chat.get(parent) if parent >= 0 else None
        orphans += parent >= 0 and par is None
        if par is not None and session_of[parent][-1] is par:
            reqs = session_of[parent]
        else:
            forks += par is not None
            reqs = []
            sessions.append(reqs)
        sid = reqs[0].session_id if reqs else f"c{chat}"
        req = Request(
            request_id=str(chat),
            session_id=sid,
            turn=len(reqs),
            input_tokens=n_in,
            output_tokens=n_out,
            blocks=blocks,
            arrival_s=ts - t0,
            think_s=(ts - t0) - par.arrival_s if par is not None else 0.0,
            parent_id=par.request_id if par is not None else None,
        )
        reqs.append(req)
        by_chat[chat] = req
        session_of[chat] = reqs
    return Workload(
        [Session(s[0].session_id, s) for s in sessions],
        meta={
            "format": "bailian",
            "source": str(path),
            "block_tokens": block_tokens,
            "rows_with_adjusted_blocks": adjusted,
            "missing_parents": orphans,
            "forks": forks,
        },
    )
