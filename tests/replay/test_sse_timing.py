"""SSE timing follows `vllm bench serve`: TTFT at the first choices event, ITL between them."""

from __future__ import annotations

import json

from agentic_kvc.replay.client import receipt_from_headers
from agentic_kvc.replay.sse import StreamTiming


def _ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode()


def test_ttft_itl_and_end_follow_content_events_only() -> None:
    t = StreamTiming(t_send=10.0)
    t.feed_line(b": keep-alive comment", 10.05)
    t.feed_line(_ev({"choices": [{"text": "a"}]}), 10.2)
    t.feed_line(b"", 10.21)
    t.feed_line(_ev({"choices": [{"text": ""}]}), 10.3)  # empty text still counts as a token
    t.feed_line(_ev({"choices": [{"text": "c"}]}), 10.45)
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    t.feed_line(_ev({"choices": [], "usage": usage}), 10.9)  # usage moves no timestamp
    t.feed_line(b"data: [DONE]", 11.0)
    assert t.done and t.error is None
    assert t.t_first == 10.2
    assert t.t_last == 10.45
    assert [round(x, 6) for x in t.itl] == [0.1, 0.15]
    assert t.text == "ac"
    assert (t.output_tokens, t.prompt_tokens, t.cached_tokens) == (3, 9, 4)


def test_without_usage_tokens_are_counted_from_events() -> None:
    t = StreamTiming(t_send=0.0)
    for k in range(4):
        t.feed_line(_ev({"choices": [{"text": "x"}]}), 1.0 + k)
    assert t.output_tokens == 4 and t.cached_tokens is None and t.prompt_tokens is None


def test_error_event_and_garbage_are_errors() -> None:
    t = StreamTiming(t_send=0.0)
    t.feed_line(_ev({"error": {"message": "engine dead"}}), 1.0)
    assert t.error == "stream error: engine dead"
    g = StreamTiming(t_send=0.0)
    g.feed_line(b"data: {not json", 1.0)
    assert g.error is not None and "unparseable" in g.error


def test_chat_deltas_are_text() -> None:
    t = StreamTiming(t_send=0.0)
    t.feed_line(_ev({"choices": [{"delta": {"content": "hi"}}]}), 1.0)
    assert t.text == "hi"


def test_receipt_from_json_header_and_single_fields() -> None:
    got = receipt_from_headers(
        {"X-AKVC-Receipt": json.dumps({"route_class": "WARM", "prefill_instance": 1})}
    )
    assert got == {"route_class": "WARM", "prefill_instance": 1}
    got = receipt_from_headers(
        {"x-akvc-route-class": "HEAVY", "x-akvc-prefill": "0", "x-akvc-reason": "r"}
    )
    assert got == {"route_class": "HEAVY", "prefill_instance": 0, "reason": "r"}
    assert receipt_from_headers({"content-type": "text/event-stream"}) == {}
