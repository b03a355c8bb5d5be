"""Mooncake traces (FAST'25, kvcache-ai/Mooncake, Apache-2.0), with sessions rebuilt.

Format: one JSON object a line, `timestamp` (ms since the trace start), `input_length`,
`output_length`, `hash_ids` (one id per 512-token block of the prompt; an id always stands for
the same content at the same position, so equal leading ids mean a shared prefix). Published as
`FAST25-release/traces/{conversation,toolagent}_trace.jsonl` by Qin et al., "Mooncake: A
KVCache-centric Disaggregated Architecture for LLM Serving" (FAST 2025).

The trace does not label sessions. They are rebuilt from the hash chains: requests are taken
in arrival order and walked down a trie of block ids; a request whose leading ids match an
earlier request's for at least `min_shared_blocks` blocks continues an earlier request: of
those with the longest match, the one with the shortest prompt (the one the match covers
best: a turn re-sends its parent's prompt, except a partial last block that gets a new id once
full), the most recent on ties. Two is the default because block 0 is a system
prompt every request of the conversation trace shares: sharing more means sharing a
conversation. A continuation of the current last turn of a session joins it; a second
continuation of an older turn (a fork, rare) starts a new session whose first request keeps its
`parent_id`. `think_s` is the gap from the parent's arrival, so it includes the parent's
original service time (the trace has no completion times).
"""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.workload.formats.common import (
    blocks_from_hash_ids,
    get_id_list,
    get_int,
    iter_json_lines,
)
from agentic_kvc.workload.model import Block, Request, Session, Workload

BLOCK_TOKENS = 512
KEYS = ("timestamp", "input_length", "output_length", "hash_ids")


def read_mooncake(
    path: Path, *, block_tokens: int = BLOCK_TOKENS, min_shared_blocks: int = 2
) -> Workload:
    rows: list[tuple[int, int, int, int, tuple[Block, ...], list[int]]] = []
    adjusted = 0
    for lineno, obj in iter_json_lines(path):
        ts = get_int(obj, "timestamp", path, lineno)
        n_in = get_int(obj, "input_length", path, lineno)
        n_out = get_int(obj, "output_length", path, lineno)
        ids = get_id_list(obj, "hash_ids", path, lineno)
        blocks, adj = blocks_from_hash_ids(ids, n_in, block_tokens, lineno)
        adjusted += adj
        rows.append((ts, lineno, n_in, n_out, blocks, [b.id for b in blocks]))
    rows.sort(key=lambda r: (r[0], r[1]))  # arrival order, file order on ties
    return build_sessions_from_chains(
        rows,
        min_shared_blocks=min_shared_blocks,
        time_unit_s=1e-3,
        meta={
            "format": "mooncake",
            "source": str(path),
            "block_tokens": block_tokens,
            "rows_with_adjusted_blocks": adjusted,
        },
    )


def build_sessions_from_chains(
    rows: list[tuple[int, int, int, int, tuple[Block, ...], list[int]]],
    *,
    min_shared_blocks: int,
    time_unit_s: float,
    meta: dict[str, object],
) -> Workload:
    """Rows (time, line, input, output, blocks, chain ids) in arrival order -> sessions.

    The trie is a dict from (parent node, block id) to node; each node remembers the best
    parent candidate through it (shortest chain, then latest). One walk per request finds the
    deepest shared node, one more inserts the request: linear in the number of block ids.
    """
    child: dict[tuple[int, int], int] = {}
    best: list[int] = []  # node -> index into `requests` of its best parent candidate
    best_len: list[int] = []  # node -> that candidate's chain length
    requests: list[Request] = []
    session_of: list[int] = []  # request index -> session index
    sessions: list[list[Request]] = []
    t0 = rows[0][0] if rows else 0
    forks = 0
    for ts, lineno, n_in, n_out, blocks, chain in rows:
        node, depth = -1, 0
        for b in chain:
            nxt = child.get((node, b))
            if nxt is None:
                break
            node, depth = nxt, depth + 1
        arrival = (ts - t0) * time_unit_s
        parent = best[node] if depth >= min_shared_blocks else None
        idx = len(requests)
        if parent is not None and sessions[session_of[parent]][-1] is requests[parent]:
            s = session_of[parent]
        else:
            forks += parent is not None
            s = len(sessions)
            sessions.append([])
        session_id = f"s{sessions[s][0].request_id[1:]}" if sessions[s] else f"s{lineno}"
        req = Request(
            request_id=f"r{lineno}",
            session_id=session_id,
            turn=len(sessions[s]),
            input_tokens=n_in,
            output_tokens=n_out,
            blocks=blocks,
            arrival_s=arrival,
            think_s=arrival - requests[parent].arrival_s if parent is not None else 0.0,
            parent_id=requests[parent].request_id if parent is not None else None,
        )
        requests.append(req)
        session_of.append(s)
        sessions[s].append(req)
        node = -1
        for b in chain:
            key = (node, b)
            nxt = child.get(key)
            if nxt is None:
                nxt = child[key] = len(best)
                best.append(idx)
                best_len.append(len(chain))
            elif len(chain) <= best_len[nxt]:
                best[nxt], best_len[nxt] = idx, len(chain)
            node = nxt
    meta = dict(meta)
    meta.update(
        {
            "min_shared_blocks": min_shared_blocks,
            "continuations": sum(r.parent_id is not None for r in requests),
            "forks": forks,
        }
    )
    return Workload([Session(s[0].session_id, s) for s in sessions], meta=meta)
