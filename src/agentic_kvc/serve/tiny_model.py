"""A tiny Qwen2-shaped model directory built locally: config + a tokenizer trained here.

vLLM needs a model directory even with `--load-format dummy` (which gives deterministic random
weights instead of reading any). No hub access is possible, so the tokenizer is a byte-level BPE
trained with the `tokenizers` library on text generated from a fixed seed: the same directory
comes out on every machine. Shape facts follow ../shared/notes/real_vllm_on_cpu.md.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from agentic_kvc.profiles.tiny_model import MAX_POSITIONS, VOCAB_SIZE, model_config

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen2's pre-tokenizer split (its tokenizer.json; transformers' Qwen2 tokenizer).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML, as Qwen2 uses; enough for /v1/chat/completions to render prompts.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _corpus(seed: int = 0, lines: int = 40_000) -> Iterator[str]:
    """Code- and prose-like lines from a seeded generator (no external data)."""
    rng = random.Random(seed)
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    words = [
        "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 4)))
        for _ in range(3000)
    ]
    keywords = ["def", "return", "import", "class", "for", "in", "if", "else", "self", "None"]
    punct = ["(", ")", ":", ",", ".", " = ", "[", "]", "{", "}", " + ", "_", "\n", "    "]
    for _ in range(lines):
        parts = []
        for _ in range(rng.randint(4, 16)):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(words))
            elif r < 0.75:
                parts.append(rng.choice(keywords))
            elif r < 0.9:
                parts.append(rng.choice(punct))
            else:
                parts.append(str(rng.randint(0, 9999)))
        yield " ".join(parts)


def build_tiny_model(out_dir: Path, force: bool = False) -> Path:
    """Write config.json, tokenizer.json, tokenizer_config.json, generation_config.json."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    out_dir = Path(out_dir)
    done = out_dir / "config.json"
    if done.is_file() and not force:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}")
    # The engine's text pipeline, written into the file. transformers (5.x, which vLLM loads
    # tokenizers with) reads a `qwen2` model's tokenizer as Qwen2's: NFC, then Qwen2's split
    # (each digit alone, among others) before the byte-level step, whatever tokenizer.json
    # says; the vocabulary and merges are the file's. Saying the same here keeps every other
    # reader of tokenizer.json (the proxy's tokenizer) on the engine's ids: with the plain
    # byte-level split the proxy read " 1" as one token where the engine reads two.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.save(str(out_dir / "tokenizer.json"))

    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": list(SPECIAL_TOKENS),
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": 2}, indent=2) + "\n"
    )
    # config.json last: its presence marks a complete directory.
    (out_dir / "config.json").write_text(json.dumps(model_config(), indent=2) + "\n")
    return out_dir
