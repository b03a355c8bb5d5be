"""Prompts as token ids for the target's model, from the workload's content blocks.

Token ids must lie inside the model's vocabulary and avoid its special tokens (an EOS or chat
marker in a prompt would change what the engine does), so the replayer reads both from the
model directory: the one given, or the one the target reports in `/v1/models` (`root`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import httpx

from agentic_kvc.workload.model import Request
from agentic_kvc.workload.tokens import request_token_ids, special_token_ids


def model_vocab(model_dir: Path) -> tuple[int, frozenset[int]]:
    """(usable vocab size, special ids): the smaller of config.json's and the tokenizer's size.

    config.json's vocab_size is often padded past the tokenizer's last id; an id in the gap
    has no text, which would break streamed detokenization.
    """
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{model_dir}: no config.json (not a model directory)")
    vocab = int(json.loads(cfg_path.read_text())["vocab_size"])
    specials: frozenset[int] = frozenset()
    tok_path = model_dir / "tokenizer.json"
    if tok_path.is_file():
        specials = special_token_ids(model_dir)
        data = json.loads(tok_path.read_text())
        ids = list((data.get("model") or {}).get("vocab", {}).values())
        ids += [int(t["id"]) for t in data.get("added_tokens", [])]
        if ids:
            vocab = min(vocab, max(ids) + 1)
    return vocab, specials


def target_model(target: str, timeout_s: float = 10.0) -> tuple[str, Path | None]:
    """(served model name, local model dir if the target's `root` is one) from /v1/models."""
    try:
        resp = httpx.get(target.rstrip("/") + "/v1/models", timeout=timeout_s)
        resp.raise_for_status()
        entry = resp.json()["data"][0]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(f"{target}/v1/models: cannot read the served model ({exc})") from None
    root = entry.get("root")
    path = Path(root) if isinstance(root, str) and Path(root).is_dir() else None
    return str(entry["id"]), path


def token_fn(model_dir: Path) -> partial[list[int]]:
    """Request -> token ids for this model (pure: the same request gives the same ids)."""
    vocab, specials = model_vocab(model_dir)
    return partial(_ids, vocab_size=vocab, special_ids=specials)


def _ids(req: Request, vocab_size: int, special_ids: Sequence[int]) -> list[int]:
    return request_token_ids(req, vocab_size, special_ids=special_ids)
