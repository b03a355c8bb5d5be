"""`PromptIdsMemo`: a token-id prompt that extends a remembered one is read from where that one
ends, and every answer equals a whole read of the body (`parse_request` without a memo)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_kvc.proxy.ids_memo import PromptIdsMemo
from agentic_kvc.proxy.prompt import parse_request

SYSTEM = list(range(50_000, 51_000))  # ~6 KB of ids that every session starts with


def _raw(prompt: Any, compact: bool = True, **fields: Any) -> bytes:
    seps = (",", ":") if compact else (", ", ": ")
    return json.dumps({"model": "m", "prompt": prompt, **fields}, separators=seps).encode()


def _j(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _same_as_whole(raw: bytes, memo: PromptIdsMemo) -> tuple[Any, np.ndarray | None]:
    """Parse with the memo, and check the answer against a whole read."""
    try:
        want = parse_request(raw)
    except msgspec.DecodeError:
        with pytest.raises(msgspec.DecodeError):
            parse_request(raw, memo)
        return None, None
    got = parse_request(raw, memo)
    assert msgspec.json.encode(got[0]) == msgspec.json.encode(want[0])
    assert type(got[0].get("prompt")) is type(want[0].get("prompt"))
    if want[1] is None:
        assert got[1] is None
    else:
        assert got[1] is not None and got[1].dtype == np.int64
        assert got[1].tolist() == want[1].tolist()
    return got


@pytest.mark.parametrize("compact", [True, False])
def test_a_growing_conversation_reads_only_what_each_turn_adds(compact: bool) -> None:
    memo = PromptIdsMemo()
    prompt = [*SYSTEM]
    for turn in range(5):
        prompt += list(range(turn * 1000, turn * 1000 + 700))
        _, ids = _same_as_whole(_raw(prompt, compact, user="s"), memo)
        assert ids is not None and len(ids) == len(prompt)
    assert memo.reused_tokens == sum(len(SYSTEM) + 700 * t for t in range(1, 5))
    assert memo.read_tokens == 4 * 700
    assert len(memo) == 1  # each turn's entry replaced the last


def test_sessions_that_share_a_system_prompt_each_find_their_own_last_turn() -> None:
    memo = PromptIdsMemo()
    sessions = {s: [*SYSTEM, *range(s * 10_000, s * 10_000 + 900)] for s in range(6)}
    for turn in range(3):
        for s, prompt in sessions.items():
            prompt += [s, turn] * 50
            _same_as_whole(_raw(prompt), memo)
    assert memo.read_tokens == 2 * 6 * 100  # the first turn of each session is read whole


@pytest.mark.parametrize(
    "tail",
    [
        ["5"],  # a digit right after the remembered last id: another id, not a continuation
        [1.5],
        ["x"],
        [[2]],
        [2**63],
        [2**63 - 1],  # at the int64 bound: a whole read takes the plain path; so must this
        [-(2**63)],
        [10**30],
        [True],
        [None],
    ],
)
def test_a_continuation_that_is_not_int64_ids_gives_the_whole_read(tail: list[Any]) -> None:
    memo = PromptIdsMemo()
    base = [*SYSTEM, 12]
    _same_as_whole(_raw(base), memo)
    # ["5"]: the same JSON text with one more digit on the last id
    raw = _raw(base).replace(b",12]", b",125]") if tail == ["5"] else _raw([*base, *tail])
    _same_as_whole(raw, memo)
    if tail == ["5"]:
        assert memo.reused_tokens == 0


@pytest.mark.parametrize(
    "make",
    [
        # a nested "prompt" first: the array found by its key is not the body's prompt
        lambda p: _raw(p[:3], metadata={"prompt": p}),
        lambda p: _j({"metadata": {"prompt": p}, "prompt": p[:3]}),
        lambda p: _j({"metadata": {"prompt": p}, "prompt": 0}),
        # a key that ends in an escaped "prompt"
        lambda p: _j({'a"prompt': p, "prompt": 0}),
        # two top-level prompts: the last one counts, as in a whole read
        lambda p: b'{"prompt":' + _j(p) + b',"prompt":[1,2]}',
        lambda p: b'{"prompt":' + _j(p) + b',"prompt":' + _j(p[:-1]) + b"}",
        # bad JSON after the array, or a cut body
        lambda p: _raw(p)[:-1] + b",}",
        lambda p: _raw(p)[:-2],
        lambda p: _raw(p) + b"x",
        # the prompt array not closed before something else
        lambda p: _raw(p).replace(b"]", b',{"a":1}]'),
    ],
)
def test_bodies_that_only_look_like_a_continuation_give_the_whole_read(make: Any) -> None:
    memo = PromptIdsMemo()
    _same_as_whole(_raw(SYSTEM), memo)
    raw = make([*SYSTEM, 1, 2, 3])
    assert b"[" + _j(SYSTEM)[1:-1] + b",1,2,3" in raw  # it holds the remembered text
    _same_as_whole(raw, memo)


def test_the_forwarded_prompt_is_the_body_s_own_bytes() -> None:
    memo = PromptIdsMemo()
    _same_as_whole(_raw(SYSTEM, compact=False), memo)  # "[50000, 50001, ..."
    raw = b'{"model": "m",  "prompt" :\n [' + ", ".join(map(str, [*SYSTEM, 7, 8])).encode()
    raw += b' ] , "stream": true}'
    body, ids = _same_as_whole(raw, memo)
    assert memo.reused_tokens == len(SYSTEM)
    assert bytes(body["prompt"]) == raw[raw.index(b"[") : raw.index(b"]") + 1]
    assert ids.tolist() == [*SYSTEM, 7, 8]


def test_budget_keeps_the_latest_and_zero_turns_it_off() -> None:
    one = _raw(SYSTEM)
    per_entry = len(one) + 8 * len(SYSTEM)
    memo = PromptIdsMemo(budget_mib=1)
    n = (1 << 20) // per_entry + 3
    for s in range(n):
        _same_as_whole(_raw([s, *SYSTEM]), memo)
    assert memo.nbytes <= 1 << 20 and len(memo) == (1 << 20) // per_entry
    _same_as_whole(_raw([0, *SYSTEM, 1]), memo)  # the oldest was dropped
    _same_as_whole(_raw([n - 1, *SYSTEM, 1]), memo)  # the latest is kept
    assert memo.reused_tokens == len(SYSTEM) + 1
    off = PromptIdsMemo(budget_mib=0)
    _same_as_whole(one, off)
    _same_as_whole(_raw([*SYSTEM, 1]), off)
    assert len(off) == 0 and off.reused_tokens == 0


ids_st = st.lists(st.integers(0, 200_000), min_size=0, max_size=300)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["extend", "branch", "retry", "edit", "new", "shrink"]),
            ids_st,
            st.booleans(),
            st.integers(0, 10_000),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_any_sequence_of_prompts_reads_as_whole_reads_do(steps: list[Any]) -> None:
    """Conversations that grow, branch from an earlier turn, retry, edit their history, start
    anew or shrink; compact or spaced JSON, fields before or after the prompt."""
    memo = PromptIdsMemo()
    history: list[list[int]] = [[*SYSTEM]]
    for kind, ids, compact, pick in steps:
        base = history[pick % len(history)]
        if kind == "extend":
            prompt = [*history[-1], *ids]
        elif kind == "branch":
            prompt = [*base, *ids]
        elif kind == "retry":
            prompt = list(base)
        elif kind == "edit":
            prompt = list(base)
            prompt[pick % len(prompt)] += 1
        elif kind == "new":
            prompt = [pick, *SYSTEM, *ids]
        else:
            prompt = base[: max(len(base) - len(ids), 1)]
        fields = {"max_tokens": 4} if pick % 2 else {}
        raw = _raw(prompt, compact, **fields)
        if pick % 3 == 0:  # the prompt first, other fields after it
            raw = json.dumps({"prompt": prompt, "model": "m", "stream": True}).encode()
        _same_as_whole(raw, memo)
        history.append(prompt)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, 10**9),
            st.integers(0, 3),
            st.sampled_from(list(b'0123456789,[]{}" :-.eE\\tnul')),
        ),
        min_size=1,
        max_size=4,
    ),
    compact=st.booleans(),
)
def test_a_continuation_edited_byte_by_byte_reads_as_whole_reads_do(
    edits: list[tuple[int, int, int]], compact: bool
) -> None:
    """A remembered prompt, then a body that extends it with a few bytes inserted, deleted or
    replaced anywhere (in the JSON's syntax, the ids, the other fields): the memo's answer,
    or its error, is the whole read's."""
    memo = PromptIdsMemo()
    _same_as_whole(_raw(SYSTEM, compact, stream=True), memo)
    raw = bytearray(_raw([*SYSTEM, 7, 8, 9], compact, stream=True, user="u"))
    for where, kind, byte in edits:
        # Most edits near the end (the new ids, the fields after the array), where the
        # remembered text still matches and the memo's own checks decide.
        at = where % (len(raw) + 1) if where % 4 == 0 else max(len(raw) - where % 48, 0)
        if kind == 0:
            raw[at:at] = bytes([byte])
        elif kind == 1 and at < len(raw):
            del raw[at]
        elif at < len(raw):
            raw[at] = byte
    _same_as_whole(bytes(raw), memo)
