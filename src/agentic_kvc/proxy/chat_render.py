"""Chat requests rendered to prompt text the way a vLLM engine renders them.

The router hashes the prompt the engine will cache, so the proxy renders a chat request with
the model's chat template as vLLM 0.32 does (`vllm/renderers/chat_utils.py`,
`vllm/renderers/hf.py`, which call transformers' `apply_chat_template`):

- the template runs in transformers' Jinja environment (sandboxed, `trim_blocks`,
  `lstrip_blocks`, `{% break %}` / `{% continue %}`, `{% generation %}` blocks, `tojson`
  without HTML escaping, `raise_exception`, `strftime_now`): a template vLLM renders is never
  refused here, and tool schemas and dates come out as the engine's do;
- the request's `tools`, `documents`, `chat_template_kwargs` and `add_generation_prompt`
  (default true) are passed to it;
- messages are normalized as vLLM normalizes them for templates that take string content:
  text parts joined with newlines; the first line of a system text that starts with Claude
  Code's `x-anthropic-billing-header` dropped (its value changes on every request, so keeping
  it would give every turn a new prefix); an assistant's `tool_calls` arguments parsed from
  their JSON string to an object (`{}` when empty, invalid or not an object) and an empty
  `tool_calls` list dropped; a tool message's text parts joined.

Not mirrored (the ids may then differ from the engine's; the estimated cache view only needs
each session's turns rendered alike, which they are): templates that iterate over content
parts ("openai" content format), the `developer` role's conversion for templates without it,
multimodal parts, `continue_final_message`, and the null fields vLLM's request model adds to a
tool it re-serializes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

CLAUDE_CODE_BILLING_HEADER = "x-anthropic-billing-header"


@functools.cache
def _environment() -> Any:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(Extension):
        """`{% generation %}...{% endgeneration %}` renders its body (transformers tracks
        the assistant's spans with it; the text is the same)."""

        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def compile_template(source: str) -> Any:
    """A chat template compiled in transformers' environment."""
    return _environment().from_string(source)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
            if isinstance(text, str):
                out.append(text)
    return out


def _drop_billing_header(texts: list[str]) -> list[str]:
    out = []
    for text in texts:
        if not text.startswith(CLAUDE_CODE_BILLING_HEADER):
            out.append(text)
            continue
        rest = text.partition("\n")[2]
        if rest:
            out.append(rest)
    return out


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def engine_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """`messages` as vLLM hands them to a string-content chat template (module doc)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        texts = _texts(message.get("content"))
        if role == "system":
            texts = _drop_billing_header(texts)
        msg: dict[str, Any] = {"role": role, "content": "\n".join(texts)}
        if isinstance(message.get("name"), str):
            msg["name"] = message["name"]
        if role == "assistant":
            calls = message.get("tool_calls")
            if isinstance(calls, list) and calls:
                msg["tool_calls"] = [_tool_call(c) for c in calls]
            reasoning = message.get("reasoning")
            if isinstance(reasoning, str):
                msg["reasoning"] = msg["reasoning_content"] = reasoning
        elif role == "tool" and "tool_call_id" in message:
            msg["tool_call_id"] = message["tool_call_id"]
        out.append(msg)
    return out


def _tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = dict(call["function"])
    function["arguments"] = _arguments(function.get("arguments"))
    return {**call, "function": function}


def render(template: Any, body: Mapping[str, Any], specials: Mapping[str, str]) -> str:
    """The prompt text of chat request `body` (its `messages`, `tools` and template options)
    under compiled `template`, with the tokenizer's special-token strings as variables."""
    options = body.get("chat_template_kwargs")
    variables: dict[str, Any] = {**specials, **(options if isinstance(options, Mapping) else {})}
    tools = body.get("tools")
    documents = body.get("documents")
    variables.update(
        messages=engine_messages(body.get("messages") or []),
        tools=tools if isinstance(tools, list) else None,
        documents=documents if isinstance(documents, list) else None,
        add_generation_prompt=body.get("add_generation_prompt", True) is not False,
    )
    return str(template.render(**variables))
