"""The canonical workload model every reader produces and every backend consumes.

A prompt is a sequence of content blocks. A block's id stands for fixed content: token k of
block B is the same wherever B appears, so two prompts share exactly the tokens of their common
leading run of blocks (plus, for a partial last block, the common leading tokens of that block).
This is how a trace's hash ids become real prefix reuse on a real engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, frozen=True)
class Block:
    id: int
    tokens: int


@dataclass(slots=True)
class Request:
    request_id: str
    session_id: str
    turn: int
    input_tokens: int
    output_tokens: int
    blocks: tuple[Block, ...]
    # Open loop: absolute arrival time (s). Closed loop: the first turn's arrival is the
    # session start; later turns are released `think_s` after the previous turn finished.
    arrival_s: float = 0.0
    think_s: float = 0.0
    # The request this one continues (its prompt extends the parent's), when known: the
    # previous turn for generated or session-labelled traces, the rebuilt parent for traces
    # whose sessions are recovered from hash chains (Mooncake). None for a first turn.
    parent_id: str | None = None
    # Agentic DAGs (subagents, joins): requests of other sessions that must finish before
    # this one is released (its own session's previous turn always must). A subagent's first
    # request depends on the parent turn that spawned it; the parent's join turn depends on
    # each subagent's last request. Closed-loop replay waits `think_s` after the last of them.
    depends_on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        total = sum(b.tokens for b in self.blocks)
        if self.blocks and total != self.input_tokens:
            raise ValueError(
                f"request {self.request_id}: blocks hold {total} tokens, input_tokens is "
                f"{self.input_tokens}"
            )


@dataclass(slots=True)
class Session:
    session_id: str
    requests: list[Request]
    parent_session_id: str | None = None  # the session that spawned this one (a subagent)

    @property
    def start_s(self) -> float:
        return self.requests[0].arrival_s if self.requests else 0.0


@dataclass(slots=True)
class Workload:
    sessions: list[Session]
    meta: dict[str, Any] = field(default_factory=dict)

    def requests(self) -> list[Request]:
        """All requests ordered by arrival time (ties by session then turn)."""
        out = [r for s in self.sessions for r in s.requests]
        out.sort(key=lambda r: (r.arrival_s, r.session_id, r.turn))
        return out

    def __len__(self) -> int:
        return sum(len(s.requests) for s in self.sessions)

    @property
    def has_dependencies(self) -> bool:
        return any(r.depends_on for s in self.sessions for r in s.requests)


def live_dependencies(workload: Workload) -> dict[str, tuple[str, ...]]:
    """Each request's `depends_on` restricted to requests present in the workload (a subset
    may have cut a parent or a subagent: what is not there cannot hold anything back)."""
    ids = {r.request_id for s in workload.sessions for r in s.requests}
    out = {}
    for s in workload.sessions:
        for r in s.requests:
            if r.depends_on:
                deps = tuple(d for d in r.depends_on if d in ids and d != r.request_id)
                if deps:
                    out[r.request_id] = deps
    return out
