"""Subsetting and scaling, so a public trace fits a short run and a small model.

Applied in this order (each step sees the previous one's result):

1. `window_s = (a, b)`: keep requests arriving in [a, b); times shift so `a` becomes 0.
2. `max_sessions`: the first N sessions by start time.
3. `max_requests`: the first N requests by arrival (a session keeps a prefix of its turns).
4. `token_scale = f`: every block of t tokens becomes max(1, round(f * t)) tokens, output
   lengths likewise. The new size depends only on the old one, so a block keeps the same size
   wherever it appears and a partial block stays a prefix of its full self: which tokens two
   prompts share is unchanged, only how many.
5. `max_input_tokens`: a request whose (scaled) prompt is longer is either dropped together with
   the rest of its session (`overflow="drop"`, the default: an agent whose context no longer
   fits stops), or cut to its first `max_input_tokens` tokens (`overflow="truncate"`).
6. `session_jitter_s = J` (with the run's `seed`): each session's whole timeline (every
   arrival) shifted later by its own offset, uniform in [0, J), drawn from the seed and the
   session id (a subagent session takes its root session's offset, so a spawn or a join stays
   causal); think times, contents and a session's gaps between turns unchanged, arrivals
   re-sorted. A trace replays the same times whatever the seed, so without this a trace run's
   seeds are one run; with it they are realisations of the same sessions whose openings
   interleave differently (J of the order of the trace's gap between session starts). The
   offset depends only on (seed, session id), so a session keeps its offset in any subset.
7. `rate_scale = r`: arrivals compressed r-fold (think times unchanged).
8. `time_scale = s`: arrivals and think times multiplied by s.

What was done is recorded in `workload.meta["transforms"]`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from agentic_kvc.workload.formats.common import prefix_blocks
from agentic_kvc.workload.model import Block, Request, Session, Workload

Overflow = Literal["drop", "truncate"]
_MAX_LISTED_IDS = 100  # meta lists at most this many affected request ids


def _rebuild(sessions: list[Session], keep: set[str]) -> list[Session]:
    out = []
    for s in sessions:
        reqs = [r for r in s.requests if r.request_id in keep]
        if reqs:
            out.append(Session(s.session_id, reqs, s.parent_session_id))
    return out


def _replace(r: Request, **changes: Any) -> Request:
    fields = {
        "request_id": r.request_id,
        "session_id": r.session_id,
        "turn": r.turn,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "blocks": r.blocks,
        "arrival_s": r.arrival_s,
        "think_s": r.think_s,
        "parent_id": r.parent_id,
        "depends_on": r.depends_on,
    }
    fields.update(changes)
    return Request(**fields)


def _map(sessions: list[Session], fn: Any) -> list[Session]:
    return [
        Session(s.session_id, [fn(r) for r in s.requests], s.parent_session_id) for s in sessions
    ]


def scale_tokens(workload: Workload, factor: float) -> Workload:
    if not 0 < factor <= 1:
        raise ValueError(f"token_scale must be in (0, 1], got {factor}")

    def size(t: int) -> int:
        return max(1, round(t * factor))

    def fn(r: Request) -> Request:
        blocks = tuple(Block(b.id, size(b.tokens)) for b in r.blocks)
        n_in = sum(b.tokens for b in blocks) if blocks else size(r.input_tokens)
        n_out = size(r.output_tokens) if r.output_tokens else 0
        return _replace(r, blocks=blocks, input_tokens=n_in, output_tokens=n_out)

    return Workload(_map(workload.sessions, fn), meta=dict(workload.meta))


def jitter_offset(seed: int, session_id: str, jitter_s: float) -> float:
    """A session's start offset under `session_jitter_s`: uniform in [0, jitter_s), a pure
    function of (seed, session id) (the first 8 bytes of a SHA-256, as a fraction of 2**64)."""
    digest = hashlib.sha256(f"session-jitter\0{seed}\0{session_id}".encode()).digest()
    return jitter_s * int.from_bytes(digest[:8], "big") / 2.0**64


def jitter_sessions(sessions: list[Session], jitter_s: float, seed: int) -> list[Session]:
    """Shift each session tree's arrivals by its `jitter_offset` (step 6 of the module
    docstring); sessions come back ordered by their new start."""
    if jitter_s <= 0:
        raise ValueError(f"session_jitter_s must be > 0, got {jitter_s}")
    parent = {s.session_id: s.parent_session_id for s in sessions}

    def root(sid: str) -> str:
        seen = {sid}
        while (up := parent.get(sid)) is not None and up not in seen:
            seen.add(up)
            sid = up
        return sid

    out = []
    for s in sessions:
        dt = jitter_offset(seed, root(s.session_id), jitter_s)
        reqs = [_replace(r, arrival_s=r.arrival_s + dt) for r in s.requests]
        out.append(Session(s.session_id, reqs, s.parent_session_id))
    out.sort(key=lambda s: (s.start_s, s.session_id))
    return out


def apply_transforms(
    workload: Workload,
    *,
    window_s: tuple[float, float] | None = None,
    max_sessions: int | None = None,
    max_requests: int | None = None,
    token_scale: float = 1.0,
    max_input_tokens: int | None = None,
    overflow: Overflow = "drop",
    session_jitter_s: float = 0.0,
    seed: int = 0,
    rate_scale: float = 1.0,
    time_scale: float = 1.0,
) -> Workload:
    """Subset and scale `workload` (see the module docstring for the order and meaning).
    `seed` is used by `session_jitter_s` only."""
    sessions = list(workload.sessions)
    done: dict[str, Any] = {}
    n0 = len(workload)
    if window_s is not None:
        a, b = window_s
        if not b > a:
            raise ValueError(f"window_s must be (start, end) with end > start, got {window_s}")
        keep = {r.request_id for s in sessions for r in s.requests if a <= r.arrival_s < b}
        sessions = _map(_rebuild(sessions, keep), lambda r: _replace(r, arrival_s=r.arrival_s - a))
        done["window_s"] = [a, b]
    if max_sessions is not None:
        sessions = sorted(sessions, key=lambda s: (s.start_s, s.session_id))[:max_sessions]
        done["max_sessions"] = max_sessions
    if max_requests is not None:
        ordered = Workload(sessions).requests()[:max_requests]
        sessions = _rebuild(sessions, {r.request_id for r in ordered})
        done["max_requests"] = max_requests
    if token_scale != 1.0:
        sessions = scale_tokens(Workload(sessions), token_scale).sessions
        done["token_scale"] = token_scale
    shortest = 0  # the shortest first prompt before the length limit (for the error below)
    if max_input_tokens is not None:
        shortest = min((s.requests[0].input_tokens for s in sessions if s.requests), default=0)
        sessions, info = _limit_input(sessions, max_input_tokens, overflow)
        done["max_input_tokens"] = info
    if session_jitter_s:
        sessions = jitter_sessions(sessions, session_jitter_s, seed)
        done["session_jitter_s"] = {"jitter_s": session_jitter_s, "seed": seed}
    if rate_scale != 1.0:
        if rate_scale <= 0:
            raise ValueError(f"rate_scale must be > 0, got {rate_scale}")
        sessions = _map(sessions, lambda r: _replace(r, arrival_s=r.arrival_s / rate_scale))
        done["rate_scale"] = rate_scale
    if time_scale != 1.0:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        sessions = _map(
            sessions,
            lambda r: _replace(
                r, arrival_s=r.arrival_s * time_scale, think_s=r.think_s * time_scale
            ),
        )
        done["time_scale"] = time_scale
    if n0 and not any(s.requests for s in sessions):
        # A run of nothing would "complete" with empty records; say which setting did it.
        raise ValueError(_emptied_by(n0, done, shortest))
    meta = dict(workload.meta)
    if done:
        done["requests_before"] = n0
        done["requests_after"] = sum(len(s.requests) for s in sessions)
        meta["transforms"] = done
    return Workload(sessions, meta=meta)


def _emptied_by(n0: int, done: dict[str, Any], shortest_first: int) -> str:
    """Why none of a workload's `n0` requests is left after the transforms in `done`."""
    if "max_input_tokens" in done:
        scaled = f" at token_scale {done['token_scale']}" if "token_scale" in done else ""
        return (
            f"max_input_tokens={done['max_input_tokens']['limit']:,} leaves no request of "
            f"{n0:,}: every session's first prompt is longer (the shortest has "
            f"{shortest_first:,} tokens{scaled})"
        )
    named = ", ".join(k for k in ("window_s", "max_sessions", "max_requests") if k in done)
    return f"{named or 'the workload transforms'} leave no request of {n0:,}"


def _limit_input(
    sessions: list[Session], limit: int, overflow: Overflow
) -> tuple[list[Session], dict[str, Any]]:
    affected: list[str] = []
    out = []
    for s in sessions:
        reqs = []
        for r in s.requests:
            if r.input_tokens <= limit:
                reqs.append(r)
                continue
            if overflow == "drop":
                affected.extend(x.request_id for x in s.requests[len(reqs) :])
                break
            if overflow != "truncate":
                raise ValueError(f"overflow must be 'drop' or 'truncate', got {overflow!r}")
            affected.append(r.request_id)
            blocks = tuple(prefix_blocks(r.blocks, limit)) if r.blocks else ()
            reqs.append(_replace(r, blocks=blocks, input_tokens=limit))
        if reqs:
            out.append(Session(s.session_id, reqs, s.parent_session_id))
    info = {
        "limit": limit,
        "policy": "drop_rest_of_session" if overflow == "drop" else "truncate",
        "affected_requests": len(affected),
        "affected_ids": affected[:_MAX_LISTED_IDS],
    }
    return out, info
