"""`parse_request`: large token-id prompts parsed straight into arrays, everything else as is."""

from __future__ import annotations

import json

import msgspec
import numpy as np
import pytest

from agentic_kvc.proxy.prompt import RAW_PROMPT_MIN_BYTES, parse_request, prompt_tokens

BIG = list(range(100_000, 101_500))  # ~10 KB of JSON


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_large_token_prompt_becomes_an_array_and_reencodes_verbatim(separators) -> None:
    body = {"model": "m", "prompt": [*BIG, -3, 0], "stream": True, "metadata": {"a": [1, 2]}}
    raw = json.dumps(body, separators=separators).encode()
    assert len(raw) > RAW_PROMPT_MIN_BYTES
    parsed, tokens = parse_request(raw)
    assert tokens is not None and tokens.dtype == np.int64
    assert tokens.tolist() == body["prompt"]
    assert isinstance(parsed["prompt"], msgspec.Raw)
    assert parsed["metadata"] == {"a": [1, 2]} and parsed["stream"] is True
    parsed["stream_options"] = {"include_usage": True}
    assert json.loads(msgspec.json.encode(parsed)) == {
        **body,
        "stream_options": parsed["stream_options"],
    }
    ids, n = prompt_tokens("/v1/completions", parsed, None, tokens)
    assert n == len(body["prompt"]) and ids is tokens


@pytest.mark.parametrize(
    "prompt",
    [
        [*BIG, 1.5],  # a float: not token ids
        [*BIG[:-1], "x"],
        [BIG, BIG],  # a batch of token prompts
        "text " * 2000,
        [*BIG, 1e3],
        [],
    ],
)
def test_anything_else_takes_the_plain_path(prompt) -> None:
    raw = json.dumps({"prompt": prompt, "pad": "p" * RAW_PROMPT_MIN_BYTES}).encode()
    parsed, tokens = parse_request(raw)
    assert tokens is None
    assert parsed == json.loads(raw)


def test_small_and_non_object_bodies() -> None:
    assert parse_request(b'{"prompt": [1, 2]}') == ({"prompt": [1, 2]}, None)
    big_list = json.dumps(BIG).encode()
    assert parse_request(big_list) == (BIG, None)  # the app rejects it: not an object
    with pytest.raises(msgspec.DecodeError):
        parse_request(b'{"prompt": [1, 2' + b" " * RAW_PROMPT_MIN_BYTES)


@pytest.mark.parametrize("tail", [b"1e3", b"1E3", b"[2]", b"true", b"2.0"])
def test_raw_json_that_is_not_a_flat_int_list(tail) -> None:
    ids = ",".join(map(str, BIG)).encode()
    parsed, tokens = parse_request(b'{"prompt": [' + ids + b"," + tail + b"]}")
    assert tokens is None and parsed["prompt"][:3] == BIG[:3]


def test_trailing_comma_is_bad_json() -> None:
    ids = ",".join(map(str, BIG)).encode()
    with pytest.raises(msgspec.DecodeError):
        parse_request(b'{"prompt": [' + ids + b",]}")


@pytest.mark.parametrize(
    "edge",
    [2**63, -(2**63) - 1, 10**20, 2**63 - 1, -(2**63)],  # beyond int64, and its bounds
)
def test_ids_beyond_or_at_the_int64_bounds_take_the_plain_path(edge: int) -> None:
    """numpy clamps an integer beyond int64 silently; the large-body path must not hash a
    clamped id the short-body path would refuse (out of range, 400)."""
    body = {"prompt": [*BIG, edge, 7]}
    parsed, tokens = parse_request(json.dumps(body).encode())
    assert tokens is None and parsed == body


@pytest.mark.parametrize("inner", [b" ", b"\n\t "])
def test_a_blank_list_takes_the_plain_path(inner: bytes) -> None:
    raw = b'{"prompt": [' + inner + b'], "pad": "' + b"p" * RAW_PROMPT_MIN_BYTES + b'"}'
    parsed, tokens = parse_request(raw)
    assert tokens is None and parsed["prompt"] == []


@pytest.mark.parametrize("ids", [[0], [5], [-1]])
def test_one_id_with_padding_is_read(ids: list[int]) -> None:
    raw = json.dumps({"prompt": ids, "pad": "p" * RAW_PROMPT_MIN_BYTES}).encode()
    _, tokens = parse_request(raw)
    assert tokens is not None and tokens.tolist() == ids
