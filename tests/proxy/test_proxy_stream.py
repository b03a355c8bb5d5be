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


ERROR = _ev({"error": {"message": "boom", "type": "InternalServerError"}})
USAGE_SPACED = b'data: {"choices": [], "usage": {"completion_tokens": 2}}\n\n'
TOKEN_WITH_USAGE = _ev({"choices": [{"index": 0, "text": "x"}], "usage": {"completion_tokens": 1}})
TOKEN_NULL_USAGE = b'data: {"choices":[{"index":0,"text":"y"}],"usage":null}\n\n'
COMMENT = b": ping\n\n"
EVENTS = [ROLE, *TOKENS, USAGE, USAGE_SPACED, TOKEN_WITH_USAGE, TOKEN_NULL_USAGE, ERROR, COMMENT]


def _state(t: StreamTracker) -> tuple[object, ...]:
    return (t.first_token_seen, t.content_events, t.usage, t.error, t.done, t.buffer)


@given(
    st.lists(st.sampled_from(EVENTS), max_size=10),
    st.booleans(),
    st.sampled_from([b"", b"data: [DONE]\n\n", b'data: {"choi']),
)
def test_one_event_per_read_matches_one_read_for_all(
    events: list[bytes], drop_usage: bool, tail: bytes
) -> None:
    """Event by event (as an engine's socket reads usually come) and all in one read: the
    same bytes forwarded, the same first token, counts, usage, error and end state. Guards
    any shortcut for the common one-token-event read."""
    whole, apart = StreamTracker(drop_usage), StreamTracker(drop_usage)
    out_whole, first_whole = whole.feed(b"".join(events) + tail)
    out_apart, firsts = b"", 0
    for ev in [*events, tail]:
        out, first = apart.feed(ev)
        out_apart += out
        firsts += first
    assert out_apart == out_whole
    assert firsts == int(first_whole)
    assert _state(apart) == _state(whole)


def test_token_events_after_the_first_are_counted_and_forwarded() -> None:
    tracker = StreamTracker()
    tracker.feed(ROLE)
    for tok in TOKENS:
        assert tracker.feed(tok) == (tok, False)
    assert tracker.content_events == 1 + len(TOKENS)
    assert not tracker.done and tracker.usage is None
