from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agentic_kvc.proxy.stream import StreamTracker


def _ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


ROLE = _ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
TOKENS = [_ev({"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]}) for i in range(3)]
USAGE = _ev({"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 9}})
DONE = b"data: [DONE]\n\n"
STREAM = ROLE + b"".join(TOKENS) + USAGE + DONE


def _run(tracker: StreamTracker, data: bytes, cuts: list[int]) -> tuple[bytes, int]:
    out, firsts, prev = b"", 0, 0
    for cut in [*sorted(cuts), len(data)]:
        chunk, first = tracker.feed(data[prev:cut])
        out += chunk
        firsts += first
        prev = cut
    return out, firsts


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_bytes_pass_through_unchanged_wherever_chunks_are_cut(cuts: list[int]) -> None:
    tracker = StreamTracker()
    out, firsts = _run(tracker, STREAM, cuts)
    assert out == STREAM
    assert firsts == 1  # first token reported exactly once
    assert tracker.done and tracker.usage == {"completion_tokens": 3, "prompt_tokens": 9}


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_usage_event_is_dropped_when_proxy_asked_for_it(cuts: list[int]) -> None:
    tracker = StreamTracker(drop_usage_event=True)
    out, _ = _run(tracker, STREAM, cuts)
    assert out == ROLE + b"".join(TOKENS) + DONE
    assert tracker.usage is not None and tracker.usage["completion_tokens"] == 3


def test_first_token_is_first_event_with_choices() -> None:
    tracker = StreamTracker()
    out, first = tracker.feed(b": keep-alive comment\n\n")
    assert out == b": keep-alive comment\n\n" and not first
    _, first = tracker.feed(ROLE)
    assert first


def test_engine_error_event_is_recorded_and_forwarded() -> None:
    err = _ev({"error": {"message": "boom", "type": "InternalServerError"}})
    tracker = StreamTracker()
    out, _ = tracker.feed(err)
    assert out == err and tracker.error == "boom"


def test_partial_event_is_held_back_until_complete() -> None:
    tracker = StreamTracker()
    out, first = tracker.feed(TOKENS[0][:10])
    assert out == b"" and not first
    out, first = tracker.feed(TOKENS[0][10:])
    assert out == TOKENS[0] and first
