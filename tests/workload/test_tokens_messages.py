"""`workload.tokens.block_messages`: a workload request as a conversation, one message per
block, so a turn's messages start with those of the turn it extends (as an agent's do)."""

from __future__ import annotations

from agentic_kvc.replay.client import chat_body, completion_body
from agentic_kvc.workload.model import Block, Request
from agentic_kvc.workload.tokens import block_messages, request_text


def _turn(k: int, sizes: tuple[int, ...] = (40, 7, 0, 13, 25)) -> Request:
    blocks = tuple(Block(100 + j, sizes[j]) for j in range(k + 1))
    return Request(f"r{k}", "s", k, sum(b.tokens for b in blocks), 4, blocks)


def test_a_turn_extends_the_conversation_of_the_one_before() -> None:
    turns = [block_messages(_turn(k)) for k in range(5)]
    for k in range(1, 5):
        assert turns[k][:k] == turns[k - 1] and len(turns[k]) == k + 1
    assert [m["role"] for m in turns[4]] == ["system", "user", "assistant", "user", "assistant"]
    # Each block's words, as the whole prompt's text has them.
    assert "".join(m["content"] for m in turns[4]) == request_text(_turn(4))
    assert [len(m["content"].split()) for m in turns[4]] == [40, 7, 0, 13, 25]


def test_the_chat_body_samples_as_the_completion_body() -> None:
    chat = chat_body("m", [{"role": "user", "content": "x"}], 5, "s1")
    done = completion_body("m", [1, 2], 5, "s1")
    assert chat.pop("messages") == [{"role": "user", "content": "x"}]
    assert chat == {k: v for k, v in done.items() if k != "prompt"}
