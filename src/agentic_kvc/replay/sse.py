"""Timing of one streamed `/v1/completions` response, as `vllm bench serve` measures it.

`vllm bench serve` (async_request_openai_completions) stamps every SSE event that carries
`choices` (even with empty text, e.g. a special token): the first such event gives TTFT, each
later one an inter-token latency (ITL) from the previous one, and the last one ends the request
(E2E latency = last content event - send). The usage event that follows (empty `choices`) gives
the token counts but is not a token, so it moves no timestamp. This module keeps those rules in
one pure object so they can be tested without a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DONE = b"[DONE]"


@dataclass(slots=True)
class StreamTiming:
    t_send: float
    t_first: float | None = None
    t_last: float | None = None
    itl: list[float] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    content_events: int = 0
    usage: dict[str, Any] | None = None
    error: str | None = None
    done: bool = False

    def feed_line(self, line: bytes, now: float) -> None:
        """One line of the SSE body (without the trailing newline)."""
        line = line.strip()
        if not line or line.startswith(b":"):  # blank separator or SSE comment
            return
        if not line.startswith(b"data:"):
            return  # event:/id: fields carry nothing vLLM uses
        payload = line[5:].strip()
        if payload == DONE:
            self.done = True
            return
        try:
            data = json.loads(payload)
        except ValueError:
            self.error = f"unparseable SSE event: {payload[:120]!r}"
            return
        if not isinstance(data, dict):
            return
        if data.get("error"):
            err = data["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = f"stream error: {msg}"
            return
        if data.get("usage"):
            self.usage = data["usage"]
        choices = data.get("choices")
        if choices:
            if self.t_first is None:
                self.t_first = now
            else:
                assert self.t_last is not None
                self.itl.append(now - self.t_last)
            self.t_last = now
            self.content_events += 1
            text = choices[0].get("text")
            if text is None:  # chat completions stream deltas instead of text
                text = (choices[0].get("delta") or {}).get("content")
            self.text_parts.append(text or "")

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def output_tokens(self) -> int:
        """Usage's completion_tokens when sent, else one token per content event."""
        if self.usage and self.usage.get("completion_tokens") is not None:
            return int(self.usage["completion_tokens"])
        return self.content_events

    @property
    def prompt_tokens(self) -> int | None:
        if self.usage and self.usage.get("prompt_tokens") is not None:
            return int(self.usage["prompt_tokens"])
        return None

    @property
    def cached_tokens(self) -> int | None:
        """Engine-reported prefix-cache hit tokens (`--enable-prompt-tokens-details`)."""
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        got = details.get("cached_tokens")
        return int(got) if got is not None else None
