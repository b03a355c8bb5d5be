"""Token ids of a chat prompt that extends an earlier one, without tokenizing it again.

An agent's chat request re-sends the whole conversation every turn, so its rendered prompt is
the previous turn's plus the reply and the tool output. Tokenizing it whole costs about
0.7 us a token (71 ms for a 101k-token conversation with the tiny model's BPE, the event loop
blocked meanwhile; `benchmarks/proxy_request_path.py --chat-lengths`, docs/proxy.md), where
the proxy's whole routing path for the same prompt sent as token ids is 1-3 ms.

`PrefixTokenMemo` keeps, for recently tokenized prompts, their text and ids. A new prompt that
starts with one of those texts up to one of its special tokens (`<|im_start|>` and the like)
takes that text's ids up to there and tokenizes only the rest. That is exact, not a
guess: a `tokenizers` tokenizer splits its input at added tokens before normalizing,
pre-tokenizing and BPE, so ids(a + b) == ids(a) + ids(b) whenever b starts with a special
token that cannot be read differently at that place. `PrefixTokenMemo` is only on when
that holds for the tokenizer: no special token strips whitespace around it or matches as a
single word or after normalization, no added token can run into a special one, the tokenizer
neither truncates nor pads, and an encoded sample agrees with the cut one (`split_safe`).
Otherwise every prompt is tokenized whole.

Related: llm-d's KV-cache manager keeps an LRU "prefix store" of tokenized text chunks for
the same reason (llm-d/llm-d-kv-cache-manager, docs/architecture).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_BUDGET_MIB = 256
# A prompt remembers where its last few special tokens start: the next turn usually shares
# all of it (the cut is then its generation prompt), but a template may render the last
# assistant turn differently once it is history (Qwen3 drops its reasoning), and an earlier
# cut still holds.
CUTS_KEPT = 4
# How many of a new prompt's special tokens, from its end, are tried as the cut: a turn adds
# a reply and one message per tool result, two special tokens each.
CANDIDATES = 32


@dataclass(slots=True, eq=False)
class _Entry:
    text: str
    ids: np.ndarray  # int64, the whole text's
    cuts: dict[int, int] = field(default_factory=dict)  # char offset -> its token index

    @property
    def nbytes(self) -> int:
        return len(self.text) + self.ids.nbytes


def split_safe(tokenizer: Any) -> str | None:
    """Why cutting prompts at special tokens would change `tokenizer`'s ids (None: it
    would not). `tokenizer` is a `tokenizers.Tokenizer`."""
    added = list(tokenizer.get_added_tokens_decoder().values())
    specials = [a for a in added if a.special]
    if not specials:
        return "the tokenizer has no special tokens to cut at"
    for a in specials:
        if a.lstrip or a.rstrip or a.single_word or a.normalized:
            return (
                f"special token {a.content!r} strips whitespace, matches as a single word or "
                "after normalization"
            )
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        return "the tokenizer truncates or pads"
    contents = [a.content for a in specials]
    for long in (a.content for a in added):
        for short in contents:
            # An added token starting before a cut could reach into the special token that
            # starts there: some proper suffix of it would then begin like that one.
            for k in range(1, len(long)):
                tail = long[k:]
                if short.startswith(tail) or tail.startswith(short):
                    return f"added token {long!r} can run into special token {short!r}"
    sample_a = f"{contents[0]}system\nYou write code.\n \t{contents[-1]}\n"
    sample_b = f"{contents[0]}user\n  fix  the bug\n\n{contents[-1]}{contents[0]}assistant\n"
    whole = tokenizer.encode(sample_a + sample_b, add_special_tokens=False).ids
    cut = (
        tokenizer.encode(sample_a, add_special_tokens=False).ids
        + tokenizer.encode(sample_b, add_special_tokens=False).ids
    )
    if whole != cut:
        return "a sample prompt tokenizes differently when cut at a special token"
    return None


class PrefixTokenMemo:
    """Tokenize prompts, reusing the ids of a remembered prompt they extend (see module doc).

    Memory: the remembered texts and their ids, at most `budget_mib` MiB, least recently used
    dropped first; an entry that a new prompt extended from its last cut is dropped at once
    (the new one holds its text and ids). `budget_mib=0` turns the memo off.
    """

    def __init__(self, tokenizer: Any, budget_mib: int = DEFAULT_BUDGET_MIB) -> None:
        self._tok = tokenizer
        self.budget_bytes = budget_mib << 20
        self.off_reason = split_safe(tokenizer) if budget_mib > 0 else "budget 0"
        self.enabled = self.off_reason is None
        specials = [a for a in tokenizer.get_added_tokens_decoder().items() if a[1].special]
        self._special_text = tuple(a.content for _, a in specials)
        self._special_ids = frozenset(i for i, _ in specials)
        self._by_cut: dict[int, list[_Entry]] = {}
        self._lru: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0
        # Counters for benchmarks and tests.
        self.reused_tokens = 0
        self.encoded_tokens = 0

    def encode(self, text: str) -> np.ndarray:
        """The token ids of `text` (no special tokens added), as int64."""
        if not self.enabled:
            ids = np.array(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)
            self.encoded_tokens += len(ids)
            return ids
        found = self._find(text)
        if found is None:
            start, head = 0, np.zeros(0, dtype=np.int64)
        else:
            base, start = found
            head = base.ids[: base.cuts[start]]
            if start == max(base.cuts):
                # The whole conversation went on: the new entry stands for it. A branch from
                # an earlier cut (a retry with another tool output) keeps the old one.
                self._drop(base)
            else:
                self._lru.move_to_end(id(base))
        enc = self._tok.encode(text[start:], add_special_tokens=False)
        tail = np.array(enc.ids, dtype=np.int64)
        ids = np.concatenate([head, tail]) if len(head) else tail
        self.reused_tokens += len(head)
        self.encoded_tokens += len(tail)
        self._remember(text, ids, enc, start, len(head))
        return ids

    def _special_starts(self, text: str, lo: int, most: int) -> list[int]:
        """Up to `most` start offsets of special tokens in text[lo:], last first."""
        found: list[int] = []
        for s in self._special_text:
            end = len(text)
            for _ in range(most):
                at = text.rfind(s, lo, end)
                if at < 0:
                    break
                found.append(at)
                end = at
        found.sort(reverse=True)
        return found[:most]

    def _find(self, text: str) -> tuple[_Entry, int] | None:
        by_cut = self._by_cut
        if not by_cut:
            return None
        for at in self._special_starts(text, 0, CANDIDATES):
            entries = by_cut.get(at)
            if not entries:
                continue
            for entry in reversed(entries):  # the latest first
                if text.startswith(entry.text[:at]):
                    return entry, at
        return None

    def _remember(self, text: str, ids: np.ndarray, enc: Any, start: int, offset: int) -> None:
        cuts: dict[int, int] = {}
        for at in self._special_starts(text, start, CUTS_KEPT):
            if at == 0:  # nothing to reuse before it
                continue
            k = enc.char_to_token(at - start)
            # The token that starts there must be the special token itself (checked, not
            # assumed: a cut anywhere else would not be exact).
            if k is not None and int(ids[offset + k]) in self._special_ids:
                cuts[at] = offset + k
        if not cuts:
            return
        entry = _Entry(text, ids, cuts)
        if entry.nbytes > self.budget_bytes:
            return
        for at in cuts:
            self._by_cut.setdefault(at, []).append(entry)
        self._lru[id(entry)] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.budget_bytes:
            self._drop(next(iter(self._lru.values())))

    def _drop(self, entry: _Entry) -> None:
        if self._lru.pop(id(entry), None) is None:
            return
        self._bytes -= entry.nbytes
        for at in entry.cuts:
            entries = self._by_cut[at]
            entries.remove(entry)
            if not entries:
                del self._by_cut[at]

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        return self._bytes
