"""A tiny PaliGemma-shaped vision-language model directory built locally, for real EPD on CPU.

Why PaliGemma and not Qwen2-VL: vLLM 0.32's Qwen2-VL / Qwen2.5-VL model modules import
`transformers.models.qwen2_vl.image_processing_qwen2_vl`, which imports `torchvision` at module
level; the CPU venv has no torchvision (the only wheels on hand are CUDA builds whose `_C.so`
needs `libc10_cuda.so`, and without it `import torchvision` fails with `operator torchvision::nms
does not exist`). PaliGemma (SigLIP vision tower + Gemma LM) imports cleanly: transformers falls
back to `SiglipImageProcessorPil`. One image per prompt, a fixed number of image tokens
((image_size / patch_size)^2), inserted by vLLM's processor before the text.

The tokenizer is the tiny Qwen2 one (`serve/tiny_model.py`, trained here from a seeded corpus)
plus `<bos>`, `<image>`, `"\\n"` and PaliGemma's 1,152 `<locNNNN>`/`<segNNN>` tokens, which its HF
processor would otherwise add at load time past the embedding table. Serve with
`--load-format dummy` (deterministic random weights).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from agentic_kvc.serve.tiny_model import CHAT_TEMPLATE, MAX_POSITIONS, build_tiny_model

IMAGE_SIZE = 448
PATCH_SIZE = 14
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 1,024 embeddings per image
TEXT_HIDDEN = 256


def _extra_tokens() -> list[str]:
    # The same list as transformers' PaliGemmaProcessor EXTRA_TOKENS, spelled out so the
    # directory does not depend on a transformers import.
    return [f"<loc{i:0>4}>" for i in range(1024)] + [f"<seg{i:0>3}>" for i in range(128)]


def model_config(vocab_size: int, image_token_id: int, bos_id: int, eos_id: int) -> dict:
    text = {
        "model_type": "gemma",
        "hidden_size": TEXT_HIDDEN,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": vocab_size,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_activation": "gelu_pytorch_tanh",
        "torch_dtype": "bfloat16",
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": 0,
    }
    # The vision tower is the heavy part on purpose (4 layers, width 384, 1,024 patches): the
    # encoder stall EPD removes must be visible next to a 2-layer LM.
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": 384,
        "intermediate_size": 1536,
        "num_hidden_layers": 4,
        "num_attention_heads": 6,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
        "num_channels": 3,
        "projection_dim": TEXT_HIDDEN,
        "num_image_tokens": IMAGE_TOKENS,
        "hidden_act": "gelu_pytorch_tanh",
        "layer_norm_eps": 1e-6,
        "vision_use_head": False,
    }
    return {
        "architectures": ["PaliGemmaForConditionalGeneration"],
        "model_type": "paligemma",
        "image_token_index": image_token_id,
        "projection_dim": TEXT_HIDDEN,
        "hidden_size": TEXT_HIDDEN,
        "vocab_size": vocab_size,
        "text_config": text,
        "vision_config": vision,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": 0,
    }


def build_tiny_vlm(out_dir: Path, force: bool = False) -> Path:
    """Write config, tokenizer and processor configs for the tiny PaliGemma into OUT_DIR."""
    from tokenizers import AddedToken, Tokenizer

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file() and not force:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = build_tiny_model(Path(tmp) / "base")
        tok = Tokenizer.from_file(str(base / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<bos>", "<image>")])
    # "\n" as a token of its own: vLLM's PaliGemma processor looks it up by that spelling
    # (byte-level BPE would spell it "Ċ").
    extra = ["\n", *_extra_tokens()]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra])
    tok.save(str(out_dir / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    ids = {t: tok.token_to_id(t) for t in ("<bos>", "<image>", "<|im_end|>", "\n")}
    missing = [t for t, i in ids.items() if i is None]
    if missing:
        raise RuntimeError(f"tokenizer lacks {missing}")

    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "bos_token": "<bos>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": True,
        "add_eos_token": False,
        "image_token": "<image>",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    pre = {
        "image_processor_type": "SiglipImageProcessor",
        "processor_class": "PaliGemmaProcessor",
        "do_resize": True,
        "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        "resample": 3,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "image_seq_length": IMAGE_TOKENS,
    }
    (out_dir / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    (out_dir / "processor_config.json").write_text(
        json.dumps({"processor_class": "PaliGemmaProcessor"}, indent=2) + "\n"
    )
    bos, eos = ids["<bos>"], ids["<|im_end|>"]
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos, "eos_token_id": eos}, indent=2) + "\n"
    )
    cfg = model_config(vocab, ids["<image>"], bos, eos)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")  # last: marks done
    return out_dir
