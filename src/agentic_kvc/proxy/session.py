"""Which agent session a request belongs to.

Agent frameworks name the conversation in different places. The proxy looks, in this order,
and takes the first non-empty value:

1. body `session_id`
2. body `metadata.session_id`, then `metadata.conversation_id`
3. headers `x-session-id`, `x-conversation-id`, `x-agent-session`, `x-agent-session-id`,
   `x-thread-id`, `session-id`, `x-claude-code-session-id`
4. body `user` (OpenAI's end-user field: coarser than a session, used only as a last resort)

The body wins over headers because it is what the client wrote for this request, while
headers are often set once per HTTP client and shared by several sessions. No session means
the request is routed as a one-off (no affinity is kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SESSION_HEADERS: tuple[bytes, ...] = (
    b"x-session-id",
    b"x-conversation-id",
    b"x-agent-session",
    b"x-agent-session-id",
    b"x-thread-id",
    b"session-id",
    b"x-claude-code-session-id",
)
_HEADER_RANK = {name: rank for rank, name in enumerate(SESSION_HEADERS)}


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def session_from(body: Mapping[str, Any], headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The request's session id by the documented order, or None."""
    found = _text(body.get("session_id"))
    if found:
        return found
    meta = body.get("metadata")
    if isinstance(meta, Mapping):
        found = _text(meta.get("session_id")) or _text(meta.get("conversation_id"))
        if found:
            return found
    best: tuple[int, str] | None = None
    for name, value in headers:  # ASGI gives lower-cased names
        rank = _HEADER_RANK.get(name)
        if rank is not None and value and (best is None or rank < best[0]):
            best = (rank, value.decode("latin-1"))
    if best is not None:
        return best[1]
    return _text(body.get("user"))
