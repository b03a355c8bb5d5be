"""Anthropic Messages API requests (`POST /v1/messages`, what Claude Code sends) as chat.

vLLM serves `/v1/messages` by converting the request into a chat completion request and
rendering that with the chat template (`vllm/entrypoints/anthropic/serving.py`, 0.32). The
proxy needs the same prompt for its block hashes, so it converts the same way
(`chat_request`), then renders and tokenizes it as a chat request (`chat_render`,
`token_memo`):

- `system` (a string, or text blocks without Claude Code's `x-anthropic-billing-header`
  block) becomes one system message, its texts joined without a separator;
- a message's text blocks become its content (a single one as a string), `thinking` blocks
  its reasoning, `tool_use` blocks its tool calls (arguments as JSON text), and a user's
  `tool_result` blocks tool messages placed before it (their text items joined by newlines);
  a user message left with no content is dropped; images are left out (they are not hashed);
- `tools` become function tools (`input_schema` as the parameters).

The response is relayed unchanged; its usage says `cache_read_input_tokens` for the prefix
hit and `output_tokens` (stream: in `message_delta`), which the records take.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentic_kvc.proxy.chat_render import CLAUDE_CODE_BILLING_HEADER

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    parts = []
    for block in system if isinstance(system, list) else ():
        if not isinstance(block, Mapping) or block.get("type") != "text":
            continue
        text = block.get("text")
        if isinstance(text, str) and text and not text.startswith(CLAUDE_CODE_BILLING_HEADER):
            parts.append(text)
    return "".join(parts)


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            str(item.get("text", ""))
            for item in content
            if isinstance(item, Mapping) and item.get("type") == "text"
        ]
        return "\n".join(texts)
    return ""


def _message(msg: Mapping[str, Any], out: list[dict[str, Any]]) -> None:
    role = msg.get("role")
    content = msg.get("content")
    if role == "system":
        text = _system_text(content)
        if text:
            out.append({"role": "system", "content": text})
        return
    chat: dict[str, Any] = {"role": role}
    if isinstance(content, str):
        chat["content"] = content
        out.append(chat)
        return
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and block.get("thinking") is not None:
            reasoning.append(str(block["thinking"]))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id") or "",
                    "type": "function",
                    "function": {
                        "name": block.get("name") or "",
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
        elif kind == "tool_result":
            if role == "user":
                text = _tool_result_text(block.get("content"))
                tool_id = block.get("tool_use_id") or ""
                out.append({"role": "tool", "tool_call_id": tool_id, "content": text})
            else:
                text = str(block.get("content")) if block.get("content") else ""
                parts.append({"type": "text", "text": f"Tool result: {text}"})
    if reasoning:
        chat["reasoning"] = "".join(reasoning)
    if calls:
        chat["tool_calls"] = calls
    if parts:
        chat["content"] = parts[0]["text"] if len(parts) == 1 else parts
    if role == "user" and "content" not in chat:
        return
    out.append(chat)


def chat_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completion request vLLM makes of Messages API request `body` (for
    rendering: messages, tools and template options)."""
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for msg in body.get("messages") or ():
        if isinstance(msg, Mapping):
            _message(msg, messages)
    chat: dict[str, Any] = {"messages": messages}
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description"),
                    "parameters": t.get("input_schema"),
                },
            }
            for t in tools
            if isinstance(t, Mapping)
        ]
    if isinstance(body.get("chat_template_kwargs"), Mapping):
        chat["chat_template_kwargs"] = body["chat_template_kwargs"]
    return chat
