"""The Messages API (`/v1/messages`) in the proxy: requests converted to the chat request vLLM
makes of them (proxy/anthropic.py), and its event stream read for first token, usage and end
(proxy/stream.py). The relay against a real engine: tests/integration/test_real_vllm_proxy.py."""

from __future__ import annotations

from agentic_kvc.proxy.anthropic import chat_request
from agentic_kvc.proxy.stream import StreamTracker

# A stream as vLLM 0.32's /v1/messages wrote it on the tiny CPU engine (recorded 2026-12-02).
VLLM_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"chatcmpl-9",'
    b'"type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,'
    b'"stop_sequence":null,"usage":{"input_tokens":152,"output_tokens":0}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","content_block":'
    b'{"type":"text","text":""},"index":0}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":'
    b'"text_delta","text":" lewarogi"},"index":0}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":'
    b'"text_delta","text":" message_stop"},"index":0}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens",'
    b'"stop_sequence":null},"usage":{"input_tokens":24,"output_tokens":2,'
    b'"cache_creation_input_tokens":0,"cache_read_input_tokens":128}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def test_the_stream_is_forwarded_whole_and_read_by_event_name() -> None:
    t = StreamTracker(messages_api=True)
    out, firsts = [], []
    for i in range(0, len(VLLM_STREAM), 37):  # cut anywhere, as the network does
        o, f = t.feed(VLLM_STREAM[i : i + 37])
        out.append(o)
        firsts.append(f)
    assert b"".join(out) == VLLM_STREAM
    assert sum(firsts) == 1 and t.first_token_seen
    # The first delta is the first token: no earlier chunk reported it.
    first_at = firsts.index(True)
    assert b"content_block_delta" in b"".join(out[: first_at + 1])
    assert b"content_block_delta" not in b"".join(out[:first_at])
    assert t.content_events == 2  # a delta whose text says "message_stop" does not end it
    assert t.done and t.error is None
    assert t.usage is not None and t.usage["output_tokens"] == 2
    assert t.usage["cache_read_input_tokens"] == 128


def test_an_engine_error_event_is_recorded() -> None:
    t = StreamTracker(messages_api=True)
    err = b'event: error\ndata: {"type":"error","error":{"type":"x","message":"boom"}}\n\n'
    out, _ = t.feed(err)
    assert out == err and t.error == "boom" and not t.done


def test_a_claude_code_request_converts_as_vllm_converts_it() -> None:
    body = {
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=1a2b;"},
            {"type": "text", "text": "You are Claude Code. "},
            {"type": "text", "text": "Be brief."},
        ],
        "tools": [
            {"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}
        ],
        "messages": [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "look first", "signature": "s"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.py"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1",
                 "content": [{"type": "text", "text": "x = 1"}, {"type": "text", "text": "y"}]},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t2", "content": "ok"},
                {"type": "text", "text": "go on"}, {"type": "text", "text": "now"},
            ]},
        ],
    }  # fmt: skip
    chat = chat_request(body)
    assert chat["messages"] == [
        {"role": "system", "content": "You are Claude Code. Be brief."},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Reading.", "reasoning": "look first",
         "tool_calls": [{"id": "t1", "type": "function",
                         "function": {"name": "Read", "arguments": '{"path": "a.py"}'}}]},
        # A user message of tool results only: the tool messages, no empty user message.
        {"role": "tool", "tool_call_id": "t1", "content": "x = 1\ny"},
        # Tool results go before the text of the same user message.
        {"role": "tool", "tool_call_id": "t2", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "go on"},
                                     {"type": "text", "text": "now"}]},
    ]  # fmt: skip
    assert chat["tools"] == [
        {"type": "function", "function": {
            "name": "Read", "description": "Read a file", "parameters": {"type": "object"}}}
    ]  # fmt: skip


def test_messages_through_the_proxy_relay_and_record(make_proxy, fakes) -> None:  # type: ignore[no-untyped-def]
    """Unit test of the proxy's own logic (the fake engine speaks a few Messages API events):
    the stream is relayed byte for byte, the session comes from Claude Code's header, the
    records take output tokens from the usage, count_tokens goes to an engine."""
    import httpx

    proxy, client = make_proxy(policy="round_robin")
    head = {"x-claude-code-session-id": "cc-9"}
    body = {"model": "m", "max_tokens": 3, "stream": True,
            "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
    via = client.post("/v1/messages", json=body, headers=head)
    target = fakes[int(via.headers["x-akvc-decode"])][1]
    direct = httpx.post(target.url + "/v1/messages", json=body)
    assert via.status_code == 200 and via.content == direct.content
    assert via.content.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    whole = client.post("/v1/messages", json={**body, "stream": False}, headers=head)
    assert whole.json()["usage"]["output_tokens"] == 3
    count = client.post("/v1/messages/count_tokens", json={"messages": body["messages"]})
    assert count.status_code == 200 and count.json()["input_tokens"] > 0
    proxy.app.records.flush()
    import json
    from pathlib import Path

    recs = [json.loads(x) for x in Path(proxy.app.settings.records).read_text().splitlines()]
    assert [r["session_id"] for r in recs] == ["cc-9", "cc-9"]
    assert {r["session_source"] for r in recs} == {"header:x-claude-code-session-id"}
    assert [r["turn"] for r in recs] == [0, 1]
    assert [r["output_tokens"] for r in recs] == [3, 3] and all(not r["error"] for r in recs)
    assert recs[0]["t_first_token"] is not None


def test_the_proxys_own_mid_stream_error_is_a_messages_api_event() -> None:
    import json

    from agentic_kvc.proxy.app import _sse_error

    ev = _sse_error("engine 0 dropped", "upstream_error", 502, messages_api=True)
    name, data = ev.decode().strip().split("\n")
    assert name == "event: error"
    assert json.loads(data.removeprefix("data: ")) == {
        "type": "error", "error": {"type": "upstream_error", "message": "engine 0 dropped"}
    }  # fmt: skip
    t = StreamTracker(messages_api=True)
    t.feed(ev)
    assert t.error == "engine 0 dropped"
