"""Token ids of a token-id prompt that extends an earlier one, without reading its JSON again.

An agent re-sends its whole conversation every turn, and a client that speaks token ids (the
replay driver, a gateway that tokenizes) sends the last turn's ids again with the new ones
after them. Reading a 100k-token prompt's JSON costs the proxy about 2.5 ms on its event loop
(msgspec's scan of the body, then numpy reading the digits; `benchmarks/
proxy_request_path.py --steps`), most of its routing path at that length.

`PromptIdsMemo` keeps, for recent large token-id prompts, the body (so the JSON text of the
array up to its last id, `[1,2,...,n`, is at hand without a copy) and the ids. A body whose
`prompt` array starts with one of those texts takes those ids and reads only what follows. The
answer is the one a whole read gives (`prompt.parse_request` falls back to it otherwise): the
remembered text was read as JSON before; what follows it must read as the rest of a list of
integers within int64 after an id (it is decoded after `[0`, so a digit glued to the last id,
`05`, is refused); and the rest of the body is decoded with the array replaced by a placeholder
no client can guess, which must come back as the body's top-level `prompt` (so the array found
by its key is that field, not a nested one or a duplicate key, and the rest is valid JSON).

Found without a session id (as `token_memo.PrefixTokenMemo`): a remembered text of L bytes
is indexed by its `WINDOW` bytes that end at the largest power of two not above L, and a
prompt that extends it holds the same bytes there. Those bytes lie in the text's second half,
so prompts that share only a system prompt shorter than that half do not collide; where they
do, the latest `CANDIDATES` per place are checked.
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass

import msgspec
import numpy as np

from agentic_kvc.proxy.token_memo import DEFAULT_BUDGET_MIB

WINDOW = 32
MIN_LEVEL = 12  # texts under 4 KiB are not kept: reading them whole is as fast
CANDIDATES = 4
_KEY = b'"prompt"'
_TO_LIST = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*\[")  # a key's colon, then a list
_INT64 = np.iinfo(np.int64)


def at_int64_bound(ids: np.ndarray) -> bool:
    """Whether a non-empty id array holds an int64 bound. numpy clamps an integer beyond int64
    to a bound without a word, so a whole read sends such a prompt the plain way (Python ints,
    then "out of range", 400, as a short body); a memo's answer must be the same."""
    return bool(ids.max() == _INT64.max or ids.min() == _INT64.min)


_decode_ints = msgspec.json.Decoder(list[int]).decode
_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode = msgspec.json.Decoder().decode


@dataclass(slots=True, eq=False)
class _Entry:
    raw: bytes  # the body that held the prompt (kept whole: no copy of a long prompt is made)
    start: int  # where its prompt array's "[" is
    n: int  # the array's JSON through its last id is raw[start : start + n]
    ids: np.ndarray  # int64
    key: tuple[int, bytes]

    @property
    def nbytes(self) -> int:
        return len(self.raw) + self.ids.nbytes


_BLANKS = b" \t\r\n"


def prompt_list_start(raw: bytes) -> int | None:
    """Where the list of the body's first key "prompt" whose value is a list starts (its
    "["), top-level or nested; None if there is none. The key's quote cannot be an escaped one
    inside a string, as it must follow "{" or "," (and blanks). Found with `bytes.find` (a
    regex over the whole body took 2.6 ms on a 400 KB chat body)."""
    pos = raw.find(_KEY)
    while pos >= 0:
        before = pos - 1
        while before >= 0 and raw[before] in _BLANKS:
            before -= 1
        if before >= 0 and raw[before] in b"{,":
            m = _TO_LIST.match(raw, pos + len(_KEY))
            if m is not None:
                return m.end() - 1
        pos = raw.find(_KEY, pos + 1)
    return None


def _through_last_id(raw: bytes, close: int) -> int:
    """The end of the last id before the array's "]" at `close`."""
    end = close
    while raw[end - 1] in _BLANKS:
        end -= 1
    return end


def _address(buf: bytes | msgspec.Raw) -> int:
    return int(np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0])


def _offset_in(raw: bytes, part: msgspec.Raw) -> int | None:
    """Where `part` lies in `raw`, if it is a view of it: msgspec decodes a `Raw` field as one
    (no copy), and memory inside `raw`'s buffer holds `raw`'s bytes. None otherwise."""
    offset = _address(part) - _address(raw)
    return offset if 0 <= offset <= len(raw) - len(part) else None


class PromptIdsMemo:
    """Read large token-id prompts, reusing the ids of a remembered prompt they extend (see
    the module doc). Memory: at most `budget_mib` MiB of bodies and ids, least recently used
    dropped first; the entry a new prompt extended is dropped (the new one holds its ids).
    `budget_mib=0` turns it off."""

    def __init__(self, budget_mib: int = DEFAULT_BUDGET_MIB) -> None:
        self.budget_bytes = budget_mib << 20
        self.enabled = budget_mib > 0
        self._placeholder = b'"akvc-' + secrets.token_hex(16).encode() + b'"'
        self._index: dict[tuple[int, bytes], list[_Entry]] = {}
        self._lru: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0
        # Counters for benchmarks and tests.
        self.reused_tokens = 0
        self.read_tokens = 0

    def parse(self, raw: bytes) -> tuple[dict[str, object], np.ndarray] | None:
        """(body, prompt ids) when `raw`'s prompt extends a remembered one, else None: the
        caller reads the body whole (and `remember`s its prompt)."""
        if not self._lru:
            return None
        start = prompt_list_start(raw)
        if start is None:
            return None
        entry = self._find(raw, start)
        if entry is None:
            return None
        cont = start + entry.n
        close = raw.find(b"]", cont)
        if close < 0:
            return None
        try:
            tail = _decode_ints(b"[0" + raw[cont:close] + b"]")[1:]
            fields = _decode_fields(raw[:start] + self._placeholder + raw[close + 1 :])
            new = np.array(tail, dtype=np.int64)
        except (msgspec.DecodeError, msgspec.ValidationError, OverflowError):
            return None
        prompt = fields.get("prompt")
        if prompt is None or bytes(prompt) != self._placeholder:
            return None
        if len(new) and at_int64_bound(new):
            return None  # as a whole read: an id at a bound takes the plain path
        body: dict[str, object] = {
            k: msgspec.Raw(memoryview(raw)[start : close + 1]) if k == "prompt" else _decode(v)
            for k, v in fields.items()
        }
        ids = np.concatenate([entry.ids, new]) if len(new) else entry.ids
        self.reused_tokens += len(entry.ids)
        self.read_tokens += len(new)
        self._drop(entry)
        self._add(raw, start, _through_last_id(raw, close) - start, ids)
        return body, ids

    def remember(self, raw: bytes, array_json: msgspec.Raw, ids: np.ndarray) -> None:
        """Keep a prompt read whole: `raw` the body, `array_json` its `prompt` field as the
        whole read decoded it (`[...]`), `ids` its ids."""
        if not self.enabled or not len(ids) or len(array_json) < 1 << MIN_LEVEL:
            return
        start = _offset_in(raw, array_json)
        if start is not None:
            self._add(raw, start, _through_last_id(raw, start + len(array_json) - 1) - start, ids)

    def _add(self, raw: bytes, start: int, n: int, ids: np.ndarray) -> None:
        level = n.bit_length() - 1
        end = start + (1 << level)
        entry = _Entry(raw, start, n, ids, (level, raw[end - WINDOW : end]))
        if level < MIN_LEVEL or entry.nbytes > self.budget_bytes:
            return
        self._index.setdefault(entry.key, []).append(entry)
        self._lru[id(entry)] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.budget_bytes:
            self._drop(next(iter(self._lru.values())))

    def _find(self, raw: bytes, start: int) -> _Entry | None:
        level = (len(raw) - start).bit_length() - 1
        while level >= MIN_LEVEL:
            end = start + (1 << level)
            entries = self._index.get((level, raw[end - WINDOW : end]))
            if entries:
                for e in reversed(entries[-CANDIDATES:]):  # the latest first
                    if raw.startswith(e.raw[e.start : e.start + e.n], start):
                        return e
            level -= 1
        return None

    def _drop(self, entry: _Entry) -> None:
        if self._lru.pop(id(entry), None) is None:
            return
        self._bytes -= entry.nbytes
        entries = self._index[entry.key]
        entries.remove(entry)
        if not entries:
            del self._index[entry.key]

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        return self._bytes
