"""Send one streamed completion and time it; every failure becomes a recorded error.

The request carries the session in the `x-session-id` header and in the body's `user` field
(the proxy reads either), and the workload's request id in `x-request-id` so the proxy's
breakdown record can be joined with the client's. The proxy's routing receipt comes back in
response headers (see `receipt_from_headers`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from agentic_kvc.replay.sse import StreamTiming

# Response headers the proxy sets on every routed request (agentic_kvc.proxy).
RECEIPT_HEADER = "x-akvc-receipt"  # the whole Decision.receipt() as JSON
RECEIPT_FIELD_HEADERS = {
    "x-akvc-policy": "policy",
    "x-akvc-route-class": "route_class",
    "x-akvc-reason": "reason",
    "x-akvc-prefill": "prefill_instance",
    "x-akvc-decode": "decode_instance",
    "x-akvc-predicted-cached-tokens": "predicted_cached_tokens",
}
_INT_FIELDS = {"prefill_instance", "decode_instance", "predicted_cached_tokens"}


def receipt_from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    """The proxy's routing receipt, or {} when the target is not our proxy."""
    lower = {k.lower(): v for k, v in headers.items()}
    out: dict[str, Any] = {}
    raw = lower.get(RECEIPT_HEADER)
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            out.update(parsed)
    for header, key in RECEIPT_FIELD_HEADERS.items():
        if header in lower and key not in out:
            value: Any = lower[header]
            if key in _INT_FIELDS:
                try:
                    value = int(value)
                except ValueError:
                    continue
            out[key] = value
    return out


def completion_body(
    model: str,
    prompt: Sequence[int] | str,
    max_tokens: int,
    session_id: str | None,
    stream: bool = True,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompt) if not isinstance(prompt, str) else prompt,
        # Every request generates exactly the workload's output length, as traces replay.
        "max_tokens": max(int(max_tokens), 1),
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if session_id is not None:
        body["user"] = session_id
    return body


def chat_body(
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    session_id: str | None,
    stream: bool = True,
) -> dict[str, Any]:
    """`completion_body`'s request for /v1/chat/completions: the same sampling and length."""
    body = completion_body(model, "", max_tokens, session_id, stream)
    del body["prompt"]
    body["messages"] = messages
    return body


@dataclass(slots=True)
class Outcome:
    """What the client saw; times are time.monotonic() values."""

    timing: StreamTiming
    t_end: float
    status: int | None = None
    receipt: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


async def send_completion(
    http: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    timeout_s: float,
) -> Outcome:
    """POST body to url and read the response to the end (stream or not), never raising."""
    t_send = time.monotonic()
    timing = StreamTiming(t_send=t_send)
    status: int | None = None
    receipt: dict[str, Any] = {}
    error: str | None = None
    try:
        async with asyncio.timeout(timeout_s):
            async with http.post(url, json=body, headers=dict(headers)) as resp:
                status = resp.status
                receipt = receipt_from_headers(resp.headers)
                if status != 200:
                    text = (await resp.read()).decode(errors="replace")
                    error = f"HTTP {status}: {text[:300]}"
                elif body.get("stream"):
                    # Line by line: aiohttp's reader splits on b"\n", SSE events end in b"\n\n".
                    async for line in resp.content:
                        timing.feed_line(line, time.monotonic())
                        if timing.error:
                            break
                    if timing.error:
                        error = timing.error
                    elif not timing.done:
                        error = "stream ended before [DONE]"
                else:
                    data = await resp.json()
                    now = time.monotonic()
                    timing.usage = data.get("usage")
                    choice = (data.get("choices") or [{}])[0]
                    text = choice.get("text")
                    if text is None:  # a chat completion's message
                        text = (choice.get("message") or {}).get("content")
                    timing.text_parts.append(text or "")
                    timing.t_last = now
                    timing.done = True
    except TimeoutError:
        error = f"timeout after {timeout_s:g} s"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except (OSError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return Outcome(
        timing=timing, t_end=time.monotonic(), status=status, receipt=receipt, error=error
    )


def new_http_session(timeout_s: float) -> aiohttp.ClientSession:
    """One pooled session for a whole replay: no connection limit (the cap is on sessions)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(timeout_s, 10.0)),
    )
