"""Chat requests rendered as the engine renders them (proxy/chat_render.py): transformers'
template environment (which vLLM renders with), and vLLM's normalization of messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.proxy.chat_render import compile_template, engine_messages, render
from agentic_kvc.proxy.prompt import PromptTokenizer

# Templates written for these tests, each using what transformers' environment has and plain
# Jinja lacks or does differently: tojson (no HTML escaping; indent), strftime_now, loop
# controls, raise_exception on a branch not taken, {% generation %}, tool-call arguments
# iterated as a mapping, reasoning, and a template option.
TOOLS_TEMPLATE = """\
{%- if tools %}<|im_start|>system
Today is {{ strftime_now("%Y-%m-%d") }}. Tools:
{% for tool in tools %}{{ tool | tojson(indent=2) }}
{% endfor %}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role not in ["system", "user", "assistant", "tool"] %}
{{- raise_exception("unknown role " + message.role) }}
{%- endif %}
<|im_start|>{{ message.role }}
{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}
{%- if message.role == "assistant" %}{% generation %}{{ message.content }}{% endgeneration %}
{%- else %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
<tool_call>{{ call.function.name }}(
{%- for k, v in call.function.arguments.items() %}{{ k }}={{ v | tojson }}{% endfor %})</tool_call>
{%- if loop.index >= 2 %}{% break %}{% endif %}
{%- endfor %}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}
{%- endif %}"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file <path> & return its text — verbatim",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]

MESSAGES = [
    {
        "role": "system",
        "content": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=1a2b3c;\n"
             "You are a coding agent."},
            {"type": "text", "text": "Be brief."},
        ],
    },
    {"role": "user", "content": "Fix the bug in ünïcode.py"},
    {
        "role": "assistant",
        "content": None,
        "reasoning": "Look at the file first.",
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "ünïcode.py"}'}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": ""}},
            {"id": "c3", "type": "function", "function": {"name": "ls", "arguments": "[1]"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "print('x')"},
                                                        {"type": "text", "text": "# end"}]},
    {"role": "assistant", "content": "Done.", "tool_calls": []},
    {"role": "user", "content": "Thanks"},
]  # fmt: skip


def test_normalized_like_vllm() -> None:
    msgs = engine_messages(MESSAGES)
    # The billing line goes, the rest of its part stays; parts are joined with newlines.
    assert msgs[0] == {"role": "system", "content": "You are a coding agent.\nBe brief."}
    calls = msgs[2]["tool_calls"]
    # Arguments become objects; empty -> {}; valid JSON that is not an object -> {}.
    assert [c["function"]["arguments"] for c in calls] == [{"path": "ünïcode.py"}, {}, {}]
    assert msgs[2]["content"] == "" and msgs[2]["reasoning_content"] == "Look at the file first."
    assert msgs[3] == {"role": "tool", "content": "print('x')\n# end", "tool_call_id": "c1"}
    assert "tool_calls" not in msgs[4]  # an empty list is dropped
    # The caller's request is not changed.
    assert MESSAGES[2]["tool_calls"][0]["function"]["arguments"] == '{"path": "ünïcode.py"}'


@pytest.mark.parametrize("thinking", [None, False])
def test_the_template_renders_as_transformers_renders_it(thinking: bool | None) -> None:
    from transformers.utils.chat_template_utils import render_jinja_template

    body: dict = {"messages": MESSAGES, "tools": TOOLS}
    kwargs = {}
    if thinking is not None:
        body["chat_template_kwargs"] = kwargs = {"enable_thinking": thinking}
    specials = {"eos_token": "<|im_end|>"}
    ours = render(compile_template(TOOLS_TEMPLATE), body, specials)
    theirs = render_jinja_template(
        [engine_messages(MESSAGES)],
        tools=TOOLS,
        chat_template=TOOLS_TEMPLATE,
        add_generation_prompt=True,
        **specials,
        **kwargs,
    )[0][0]
    assert ours == theirs
    # What plain Jinja would have got wrong: no HTML escaping in tojson, the tool schema's
    # unicode kept, the break after two calls.
    assert "<path> & return its text — verbatim" in ours
    assert ours.count("<tool_call>") == 2
    assert ("<think></think>" in ours) == (thinking is False)


def test_a_template_error_names_the_reason() -> None:
    import jinja2

    body = {"messages": [{"role": "narrator", "content": "hi"}]}
    with pytest.raises(jinja2.TemplateError, match="unknown role narrator"):
        render(compile_template(TOOLS_TEMPLATE), body, {})


def test_claude_code_turns_share_their_prefix_despite_the_billing_header(
    tiny_model: Path,
) -> None:
    """Claude Code's billing line changes every request; without dropping it, no turn of a
    session would share a prefix with the one before."""
    tok = PromptTokenizer(tiny_model)
    turns = []
    for turn, cch in enumerate(("1a2b3c", "9f8e7d")):
        system = f"x-anthropic-billing-header: cc_version=2.1; cch={cch};\nYou are a coding agent."
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "task"}]
        if turn:
            messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
        turns.append(tok.render_chat(messages, {"tools": TOOLS}))
    assert "billing" not in turns[0] and turns[1].startswith(
        turns[0][: turns[0].rindex("<|im_start|>")]
    )
    tok.encode(turns[0])
    tok.encode(turns[1])
    assert tok.memo.reused_tokens > 0
