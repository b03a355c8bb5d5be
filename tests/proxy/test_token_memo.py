"""The token-id memo of chat prompts (proxy/token_memo.py): a conversation's next turn reuses
its last turn's ids up to a special token, and the ids are always those of a whole encode."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentic_kvc.proxy.prompt import PromptTokenizer
from agentic_kvc.proxy.token_memo import PrefixTokenMemo, split_safe

# Text that is hard on a BPE cut: runs of whitespace, newlines, unicode, digits, a special
# token's text inside a message and pieces of one.
PIECES = [
    "def f(x):\n    return x\n",
    "  ",
    "\n\n",
    " \t",
    "ünïcödé ",
    "日本語",
    "12345",
    "<|im_start|>",
    "<|im_end",
    "|>",
    "Error: file not found",
    "'s",
    "\r\n",
]


def _whole(tok: PromptTokenizer, text: str) -> list[int]:
    return tok._tok.encode(text, add_special_tokens=False).ids


def _message(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))


@pytest.fixture(scope="module")
def tok(tiny_model: Path) -> PromptTokenizer:
    return PromptTokenizer(tiny_model)


def test_the_tiny_tokenizer_can_be_cut(tok: PromptTokenizer) -> None:
    assert split_safe(tok._tok) is None and tok.memo.enabled


@given(seed=st.integers(0, 2**32 - 1))
def test_each_turn_gets_the_whole_encode_ids(tiny_model: Path, seed: int) -> None:
    """Conversations that grow, branch, retry and edit their history: every prompt's ids
    equal its whole encode, and growing turns reuse ids."""
    tok = PromptTokenizer(tiny_model, memo_mib=1)
    rng = random.Random(seed)
    convs: list[list[dict[str, str]]] = [[{"role": "system", "content": _message(rng)}]]
    for _ in range(12):
        conv = list(rng.choice(convs))
        action = rng.random()
        if action < 0.7:  # the next turn: a reply and a tool output
            conv += [
                {"role": "assistant", "content": _message(rng)},
                {"role": "user", "content": _message(rng)},
            ]
        elif action < 0.85 and len(conv) > 1:  # history edited (a compaction)
            conv[rng.randrange(len(conv))] = {"role": "user", "content": _message(rng)}
        # else: the same prompt again (a retry)
        convs.append(conv)
        text = tok.render_chat(conv)
        ids = tok.encode(text)
        assert ids.dtype == np.int64 and ids.tolist() == _whole(tok, text)
    assert tok.memo.nbytes <= tok.memo.budget_bytes


def test_a_next_turn_tokenizes_only_what_it_adds(tok: PromptTokenizer) -> None:
    memo = PrefixTokenMemo(tok._tok)
    conv = [{"role": "system", "content": "You write code. " * 200}]
    conv.append({"role": "user", "content": "fix the bug " * 100})
    first = tok.render_chat(conv)
    memo.encode(first)
    assert memo.reused_tokens == 0 and len(memo) == 1
    conv += [
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "tool output"},
    ]
    second = tok.render_chat(conv)
    before = memo.encoded_tokens
    ids = memo.encode(second)
    # Reused: everything before the first turn's generation prompt (<|im_start|>assistant).
    cut = first.rindex("<|im_start|>")
    assert memo.reused_tokens == len(_whole(tok, first[:cut]))
    assert memo.encoded_tokens - before == len(_whole(tok, second[cut:]))
    assert ids.tolist() == _whole(tok, second)
    assert len(memo) == 1  # the extended entry gave way to the new one


def test_the_budget_bounds_the_memo_and_zero_turns_it_off(tok: PromptTokenizer) -> None:
    texts = [tok.render_chat([{"role": "user", "content": f"task {i} " * 9000}]) for i in range(8)]
    sizes = [len(t) + 8 * len(_whole(tok, t)) for t in texts]  # text bytes + int64 ids
    memo = PrefixTokenMemo(tok._tok, budget_mib=1)
    for t in texts:
        memo.encode(t)
    kept = max(k for k in range(1, 9) if sum(sizes[-k:]) <= 1 << 20)  # the latest that fit
    assert 1 < kept < 8 and len(memo) == kept and memo.nbytes == sum(sizes[-kept:])
    off = PrefixTokenMemo(tok._tok, budget_mib=0)
    assert not off.enabled and off.encode(texts[0]).tolist() == _whole(tok, texts[0])
    assert len(off) == 0


def test_a_tokenizer_that_cannot_be_cut_tokenizes_whole(tiny_model: Path, tmp_path: Path) -> None:
    """A special token that strips the whitespace before it would take that whitespace from
    the text before a cut: the memo is off for such a tokenizer."""
    from tokenizers import AddedToken, Tokenizer

    t = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    t.add_special_tokens([AddedToken("<|tool|>", lstrip=True, normalized=False)])
    why = split_safe(t)
    assert why is not None and "<|tool|>" in why
    memo = PrefixTokenMemo(t)
    text = "<|im_start|>user\nhi  <|tool|>x<|im_end|>\n"
    assert (
        not memo.enabled
        and memo.encode(text).tolist() == t.encode(text, add_special_tokens=False).ids
    )
    # Overlapping special tokens: one could run into the next at a cut.
    t2 = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    t2.add_special_tokens([AddedToken("x<|im", normalized=False)])
    assert "can run into" in (split_safe(t2) or "")
