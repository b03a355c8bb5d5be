"""Which agent session (and parent session) a request belongs to, and how the proxy knows.

Agent clients name their conversation in different places. The proxy takes the first
non-empty value in this order (docs/agents.md lists each convention with its source):

1. configuration: a header the operator names (`--session-header`), for a client of its own;
2. agent headers, in `AGENT_HEADERS` order: Claude Code's `x-claude-code-session-id`,
   OpenCode's `x-opencode-session`, Codex's `session_id` / `session-id`, then the generic
   `x-session-id` family (`x-session-affinity`, `x-conversation-id`, ...);
3. body fields: `session_id`, `metadata.session_id`, `metadata.conversation_id`, the
   session part of Claude Code's `metadata.user_id` (`..._session_<uuid>`), then `user`
   (OpenAI's end-user field: coarser than a session, so last);
4. otherwise the prompt itself (`PrefixSessions`): an agent's turn n+1 re-sends turn n's
   whole prompt, so a prompt that extends an earlier request's prompt continues its session.

An agent header is set by the agent for one conversation, so it outranks body fields that a
gateway or SDK may fill with a per-user value. A parent session (a subagent's spawner) comes
from `PARENT_HEADERS` or body `parent_session_id` / `metadata.parent_session_id`. Each
request's record names the source it took (`session_source`).

The session's finish signal (`RequestView.last_turn`: this turn is the session's last, so its
KV is garbage once it ends) comes from the `x-session-last-turn` header (true/false, 1/0,
yes/no) or the body's `metadata.last_turn` (a boolean). No agent client sends one today; the
replay driver sends it on every request, as the simulator gives it to every policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# (header, source label). Agent-specific names first: an agent sets them per conversation.
AGENT_HEADERS: tuple[tuple[bytes, str], ...] = (
    (b"x-claude-code-session-id", "claude-code"),
    (b"x-opencode-session", "opencode"),
    (b"session_id", "codex"),
    (b"session-id", "codex"),
    (b"x-session-id", "generic"),
    (b"x-session-affinity", "generic"),
    (b"x-conversation-id", "generic"),
    (b"x-agent-session", "generic"),
    (b"x-agent-session-id", "generic"),
    (b"x-thread-id", "generic"),
    (b"thread-id", "codex"),
)
PARENT_HEADERS: tuple[bytes, ...] = (
    b"x-parent-session-id",
    b"x-codex-parent-thread-id",
    b"x-claude-code-parent-agent-id",
)
LAST_TURN_HEADER = b"x-session-last-turn"
_TRUE, _FALSE = frozenset(("1", "true", "yes")), frozenset(("0", "false", "no"))
# Session source labels (RequestRecord.session_source).
SOURCE_CONFIG = "config"
SOURCE_PREFIX = "prefix"
_CLAUDE_USER_SESSION = (
    "_session_"  # Claude Code's metadata.user_id: user_<h>_account_<a>_session_<s>
)


@dataclass(slots=True, frozen=True)
class SessionIdentity:
    session: str | None
    source: str | None  # config | header:<name> | body:<field> | prefix | None (no session)
    parent: str | None = None
    last_turn: bool | None = None  # the finish signal; None: the client did not say


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _headers_dict(headers: Iterable[tuple[bytes, bytes]]) -> dict[bytes, str]:
    out: dict[bytes, str] = {}
    for name, value in headers:  # ASGI gives lower-cased names; the first value wins
        if value and name not in out:
            out[name] = value.decode("latin-1")
    return out


def _from_body(body: Mapping[str, Any]) -> tuple[str, str] | None:
    found = _text(body.get("session_id"))
    if found:
        return found, "body:session_id"
    meta = body.get("metadata")
    if isinstance(meta, Mapping):
        for key in ("session_id", "conversation_id"):
            found = _text(meta.get(key))
            if found:
                return found, f"body:metadata.{key}"
        user_id = _text(meta.get("user_id"))
        if user_id and _CLAUDE_USER_SESSION in user_id:
            tail = user_id.rsplit(_CLAUDE_USER_SESSION, 1)[1]
            if tail:
                return tail, "body:metadata.user_id"
    found = _text(body.get("user"))
    if found:
        return found, "body:user"
    return None


def _parent(body: Mapping[str, Any], hdrs: Mapping[bytes, str]) -> str | None:
    for name in PARENT_HEADERS:
        if name in hdrs:
            return hdrs[name]
    found = _text(body.get("parent_session_id"))
    meta = body.get("metadata")
    if not found and isinstance(meta, Mapping):
        found = _text(meta.get("parent_session_id"))
    return found


def _last_turn(body: Mapping[str, Any], hdrs: Mapping[bytes, str]) -> bool | None:
    """The finish signal, or None; a value that is not a boolean is the request's error."""
    value = hdrs.get(LAST_TURN_HEADER)
    if value is not None:
        word = value.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError(
            f"header {LAST_TURN_HEADER.decode()}: expected true/false, 1/0 or yes/no, got {value!r}"
        )
    meta = body.get("metadata")
    found = meta.get("last_turn") if isinstance(meta, Mapping) else None
    if found is None or isinstance(found, bool):
        return found
    raise ValueError(f"metadata.last_turn: expected a boolean, got {found!r}")


# Every header and body field `identify` reads (besides the configured header): a request
# with none of them names no session, and most requests of a client without one are such.
_SESSION_HEADERS = (
    frozenset(name for name, _ in AGENT_HEADERS)
    | frozenset(PARENT_HEADERS)
    | frozenset((LAST_TURN_HEADER,))
)
_SESSION_FIELDS = ("session_id", "metadata", "user", "parent_session_id")
_NO_SESSION = SessionIdentity(None, None, None)


def identify(
    body: Mapping[str, Any],
    headers: Sequence[tuple[bytes, bytes]],
    session_header: str | None = None,
) -> SessionIdentity:
    """The session named by configuration, agent headers or body (not the prompt fallback),
    with its parent and finish signal. ValueError: a finish signal that is not a boolean."""
    if (
        not session_header
        and body.keys().isdisjoint(_SESSION_FIELDS)
        and not any(name in _SESSION_HEADERS for name, _ in headers)
    ):
        return _NO_SESSION
    hdrs = _headers_dict(headers)
    parent = _parent(body, hdrs)
    last = _last_turn(body, hdrs)
    if session_header:
        value = hdrs.get(session_header.lower().encode("latin-1"))
        if value:
            return SessionIdentity(value, SOURCE_CONFIG, parent, last)
    for name, _label in AGENT_HEADERS:
        value = hdrs.get(name)
        if value:
            return SessionIdentity(value, f"header:{name.decode()}", parent, last)
    found = _from_body(body)
    if found is not None:
        return SessionIdentity(found[0], found[1], parent, last)
    return SessionIdentity(None, None, parent, last)


def session_from(body: Mapping[str, Any], headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The request's session id from headers or body, or None."""
    return identify(body, headers).session


class PrefixSessions:
    """Sessions rebuilt from prompts, for requests that carry no id.

    Keeps, for the last `capacity` requests, the router hash of each prompt's last full block
    (a chained hash: equal keys mean equal prompts up to that block) and the session it
    belonged to. A request continues the session of the earlier prompt that its own prompt
    extends in full, the longest such prompt; otherwise it starts a session of its own. Two
    sessions that merely share a system prompt do not merge: neither extends the other's whole
    prompt. O(prompt blocks) dict lookups for an unmatched prompt, one insertion per request.
    """

    def __init__(self, capacity: int = 65536) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ends: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._ends)

    def find(self, hashes: Sequence[int]) -> str | None:
        """The session whose earlier prompt this prompt extends the furthest, or None."""
        ends = self._ends
        for j in range(len(hashes) - 1, -1, -1):
            found = ends.get(hashes[j])
            if found is not None:
                return found
        return None

    def remember(self, hashes: Sequence[int], session: str) -> None:
        if not hashes:
            return
        ends = self._ends
        key = hashes[-1]
        ends.pop(key, None)  # re-inserted: the newest request's entry is evicted last
        ends[key] = session
        if len(ends) > self.capacity:
            del ends[next(iter(ends))]

    def derive(self, hashes: Sequence[int]) -> str | None:
        """The session for a prompt with no id: continued, or new (named by the prompt)."""
        if not hashes:
            return None
        found = self.find(hashes)
        if found is None:
            digest = hashlib.blake2b(str(hashes[-1]).encode(), digest_size=8).hexdigest()
            found = f"prefix-{digest}"
        return found
