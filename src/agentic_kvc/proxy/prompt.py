"""The prompt's token ids, as the router needs them for block hashing and load estimates.

Token-id prompts (what the replayer sends) are used as they are. Text prompts and chat
messages are tokenized with the model's own `tokenizer.json` (the Rust `tokenizers` library:
tens of microseconds for a short prompt); chat messages are first rendered with the model's
chat template from `tokenizer_config.json`, as vLLM does, so that the router's block hashes of
one session's turns share the same prefix the engine will cache. Without a tokenizer the
proxy still routes, but text prompts get a length estimate and no block hashes.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from agentic_kvc.proxy.anthropic import MESSAGES_PATH, chat_request
from agentic_kvc.proxy.chat_render import compile_template, engine_messages, render
from agentic_kvc.proxy.ids_memo import PromptIdsMemo, at_int64_bound
from agentic_kvc.proxy.token_memo import DEFAULT_BUDGET_MIB, PrefixTokenMemo

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4  # rough length estimate when no tokenizer is available
RAW_PROMPT_MIN_BYTES = 4096  # below this a plain decode is as fast

_decode = msgspec.json.Decoder().decode
_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def parse_request(raw: bytes, memo: PromptIdsMemo | None = None) -> tuple[Any, np.ndarray | None]:
    """(request body, the token ids of a token-id `prompt` as an int64 array, or None).

    Agentic prompts are long token-id lists. Decoding 50k ints into Python objects costs
    ~2 ms and hashing them needs an array copy on top, so a large body's `prompt` is parsed
    straight from its JSON text into an array, and kept in the body as `msgspec.Raw`: the
    encoder writes it back byte for byte when the body is forwarded. Anything that is not a
    flat list of integers takes the plain path. With `memo`, a prompt that extends a
    remembered one is read from where that one ends (`ids_memo`: the same answer). Raises
    `msgspec.DecodeError` on bad JSON.
    """
    if len(raw) < RAW_PROMPT_MIN_BYTES:
        return _decode(raw), None
    if memo is not None and memo.enabled:
        found = memo.parse(raw)
        if found is not None:
            return found
    try:
        fields = _decode_fields(raw)
    except msgspec.ValidationError:  # valid JSON, not an object: the caller rejects it
        return _decode(raw), None
    prompt = fields.get("prompt")
    tokens = _int_list(bytes(prompt)) if prompt is not None else None
    if memo is not None and tokens is not None:
        memo.remember(raw, prompt, tokens)
    body: dict[str, Any] = {
        k: v if k == "prompt" and tokens is not None else _decode(v) for k, v in fields.items()
    }
    return body, tokens


def _int_list(text: bytes) -> np.ndarray | None:
    """A JSON array of integers as int64, or None if `text` is anything else (or holds an id
    at an int64 bound: see below). `text` is valid JSON (msgspec has checked the body)."""
    inner = text.strip()
    if not (inner.startswith(b"[") and inner.endswith(b"]")):
        return None
    inner = inner[1:-1]
    with warnings.catch_warnings():
        # numpy stops at the first element that is not an integer (a float, a string, a
        # nested list): a ValueError, a DeprecationWarning before numpy 2.3.
        warnings.simplefilter("error")
        try:
            arr = np.fromstring(inner, dtype=np.int64, sep=",")
        except (DeprecationWarning, ValueError):
            return None
    if len(arr) <= 1 and not inner.strip():  # "[]" or "[ ]": numpy reads blanks as [0]
        return None
    # numpy clamps an integer beyond int64 to a bound, silently; the plain path then refuses
    # it as the short-body path does ("out of range", 400). Real token ids are far from both.
    if at_int64_bound(arr):  # (not empty: only "" reads as [], caught above)
        return None
    return arr


class PromptTokenizer:
    """The model's tokenizer and chat template. A conversation's next turn is tokenized from
    where it leaves its last turn's text (`token_memo.PrefixTokenMemo`, `memo_mib` MiB)."""

    def __init__(self, model_dir: Path, memo_mib: int = DEFAULT_BUDGET_MIB) -> None:
        from tokenizers import Tokenizer

        self.path = model_dir
        self._tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.memo = PrefixTokenMemo(self._tok, memo_mib)
        if memo_mib and not self.memo.enabled:
            log.info(
                "tokenizer %s: every prompt tokenized whole (%s)", model_dir, self.memo.off_reason
            )
        self._template = None
        cfg_path = model_dir / "tokenizer_config.json"
        if cfg_path.is_file():
            cfg = json.loads(cfg_path.read_text())
            template = cfg.get("chat_template")
            if isinstance(template, str):
                self._template = compile_template(template)
                self._specials = {
                    k: v for k, v in cfg.items() if k.endswith("_token") and isinstance(v, str)
                }

    @classmethod
    def find(
        cls, *candidates: str | Path | None, memo_mib: int = DEFAULT_BUDGET_MIB
    ) -> PromptTokenizer | None:
        """The first candidate that is a local directory holding a tokenizer.json."""
        for cand in candidates:
            if cand is None:
                continue
            path = Path(cand)
            if path.is_file() and path.name == "tokenizer.json":
                path = path.parent
            if (path / "tokenizer.json").is_file():
                return cls(path, memo_mib)
        return None

    def encode(self, text: str) -> np.ndarray:
        # Special tokens in a rendered chat template map to their ids (the memo encodes
        # without adding any), as the engine's own rendering does.
        return self.memo.encode(text)

    def render_chat(
        self, messages: Sequence[Mapping[str, Any]], request: Mapping[str, Any] | None = None
    ) -> str:
        """The prompt text of a chat request with these `messages` (and the `request`'s
        tools and template options), as the engine renders it (`chat_render`)."""
        if self._template is None:
            msgs = engine_messages(messages)
            return "".join(f"{m['role'] or ''}: {m['content']}\n" for m in msgs)
        return render(self._template, {**(request or {}), "messages": messages}, self._specials)


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(x) is int for x in value[:8])


def prompt_tokens(
    path: str,
    body: Mapping[str, Any],
    tokenizer: PromptTokenizer | None,
    parsed: np.ndarray | None = None,
) -> tuple[Sequence[int] | np.ndarray | None, int]:
    """(token ids or None when unknown, input token count) for a generation request.

    `parsed`: the prompt's token ids if `parse_request` already read them. A batched
    completions prompt (a list of prompts) is routed as a whole by its first prompt; its token
    count is the sum over the batch.
    """
    if path == MESSAGES_PATH:  # the Messages API: rendered as the chat request vLLM makes
        body = chat_request(body)
        path = "/v1/chat/completions"
    if path.endswith("/chat/completions"):
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None, 0
        if tokenizer is not None:
            ids = tokenizer.encode(tokenizer.render_chat(messages, body))
            return ids, len(ids)
        chars = sum(len(m["content"]) for m in engine_messages(messages))
        return None, max(chars // CHARS_PER_TOKEN, 1)
    if parsed is not None:
        return parsed, len(parsed)
    prompt = body.get("prompt")
    if _is_token_ids(prompt):
        return prompt, len(prompt)
    if isinstance(prompt, str):
        if tokenizer is not None:
            ids = tokenizer.encode(prompt)
            return ids, len(ids)
        return None, max(len(prompt) // CHARS_PER_TOKEN, 1)
    if isinstance(prompt, list) and prompt:
        first, total = None, 0
        for item in prompt:
            ids, n = prompt_tokens(path, {"prompt": item}, tokenizer)
            if first is None:
                first = ids
            total += n
        return first, total
    return None, 0
