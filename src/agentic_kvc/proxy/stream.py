"""Watch an upstream SSE stream for the two things timing needs, forwarding bytes unchanged.

The proxy never re-serialises a chunk. It cuts the byte stream at event boundaries (a blank
line) and forwards whole events exactly as the engine wrote them, so a client sees the
engine's bytes. Only a few events are parsed:

- events until the first one with a non-empty `choices` list: its arrival is the first token
  (the same rule as `vllm bench serve`, for completions and chat alike);
- an event that carries a `"usage"` object (the final chunk with `include_usage`): output and
  cached-token counts; when the proxy asked for usage itself, that event is dropped so the
  client gets what it asked for;
- an event with an `"error"` key: the engine's own mid-stream error, recorded.

Forwarding whole events also means an aborted stream always ends on an event boundary, so the
proxy's final error event is never glued to half an engine chunk.

The Messages API's stream (`messages_api`; `event: <name>` then `data: {...}`) is read by event
name: the first `content_block_delta` is the first token, `message_start` and `message_delta`
carry usage, `message_stop` ends it, `error` is the engine's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode


@dataclass(slots=True)
class StreamTracker:
    drop_usage_event: bool = False
    messages_api: bool = False
    buffer: bytes = b""
    first_token_seen: bool = False
    content_events: int = 0
    usage: dict[str, Any] | None = None
    error: str | None = None
    done: bool = False

    def feed(self, chunk: bytes) -> tuple[bytes, bool]:
        """Take upstream bytes; return (complete events to forward now, first token in them)."""
        data = self.buffer + chunk if self.buffer else chunk
        end = data.rfind(b"\n\n")
        if end == -1:
            self.buffer = data
            return b"", False
        complete, self.buffer = data[: end + 2], data[end + 2 :]
        first_here = False
        kept: list[bytes] = []
        dropped = False
        start = 0
        while start < len(complete):
            stop = complete.find(b"\n\n", start) + 2
            event = complete[start:stop]
            start = stop
            keep, first = self._inspect(event)
            first_here |= first
            if keep:
                kept.append(event)
            else:
                dropped = True
        # Common case: nothing removed, so forward the engine's bytes as one slice.
        return (b"".join(kept) if dropped else complete), first_here

    def _inspect(self, event: bytes) -> tuple[bool, bool]:
        """(forward this event?, is it the first token?)"""
        payload = _payload(event)
        if payload is None:
            return True, False
        if self.messages_api:
            return self._inspect_messages_api(event, payload)
        if payload == b"[DONE]":
            self.done = True
            return True, False
        is_usage = b'"usage":{' in payload or b'"usage": {' in payload
        if not self.first_token_seen or is_usage or b'"error"' in payload:
            obj = _object(payload)
            if obj is None:
                return True, False
            if "error" in obj and not obj.get("choices"):
                self.error = _error_text(obj["error"])
                return True, False
            if obj.get("choices"):
                self.content_events += 1
                first = not self.first_token_seen
                self.first_token_seen = True
                if is_usage and isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
                return True, first
            if is_usage and isinstance(obj.get("usage"), dict):
                self.usage = obj["usage"]
                return not self.drop_usage_event, False
            return True, False
        self.content_events += 1
        return True, False

    def _inspect_messages_api(self, event: bytes, payload: bytes) -> tuple[bool, bool]:
        name = event[6 : event.find(b"\n")].strip() if event.startswith(b"event:") else b""
        if name == b"content_block_delta":
            self.content_events += 1
            first = not self.first_token_seen
            self.first_token_seen = True
            return True, first
        if name == b"message_stop":
            self.done = True
        elif name in (b"message_start", b"message_delta", b"error"):
            obj = _object(payload)
            if obj is None:
                return True, False
            if name == b"error":
                self.error = _error_text(obj.get("error"))
                return True, False
            holder = obj.get("message") if name == b"message_start" else obj
            usage = holder.get("usage") if isinstance(holder, dict) else None
            if isinstance(usage, dict):  # message_delta's counts replace message_start's
                self.usage = {**(self.usage or {}), **usage}
        return True, False


def _object(payload: bytes) -> dict[str, Any] | None:
    """An event's JSON object, or None if it is not one."""
    try:
        obj = _decode(payload)
    except msgspec.DecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _error_text(err: Any) -> str:
    return str(err.get("message", err) if isinstance(err, dict) else err)


def _payload(event: bytes) -> bytes | None:
    """The data of a `data: ...` event (after an `event:` line, if any), or None for comments
    and other fields."""
    if event.startswith(b"data:"):
        return event[5:].strip()
    at = event.find(b"\ndata:")
    if at < 0:
        return None
    return event[at + 6 :].strip()
