"""A tiny BLIP-2-shaped vision-language model directory built locally, for real EPD on CPU.

Why BLIP-2 and not Qwen2-VL (the published benchmark's family): vLLM 0.32's Qwen2-VL /
Qwen2.5-VL modules import `transformers.models.qwen2_vl.image_processing_qwen2_vl`, which imports
`torchvision` at module level, and the CPU venv has no torchvision (the only wheels on hand are
CUDA builds: their `_C.so` needs `libc10_cuda.so`, and without it `import torchvision` fails with
`operator torchvision::nms does not exist`). The CLIP/SigLIP-tower models (LLaVA, PaliGemma)
fail the same way at their first request: vLLM's `vision.get_vision_encoder_info` imports its
Pixtral module, which imports torchvision. BLIP-2 (ViT + Q-Former + OPT) needs none of it:
transformers falls back to `BlipImageProcessorPil`. One image per prompt becomes
`num_query_tokens` (32) LM tokens; the ViT sees (image_size / patch_size)^2 = 1,024 patches.

The tokenizer is the tiny Qwen2 one (`serve/tiny_model.py`, trained here from a seeded corpus)
plus `<bos>` and `<image>`. Serve with `--load-format dummy` (deterministic random weights).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from agentic_kvc.profiles.tiny_model import MAX_POSITIONS
from agentic_kvc.serve.tiny_model import CHAT_TEMPLATE, build_tiny_model

IMAGE_SIZE = 448
PATCH_SIZE = 14
QUERY_TOKENS = 32  # LM tokens per image (the Q-Former's queries)
TEXT_HIDDEN = 256
VIT_HIDDEN = 384


def model_config(vocab_size: int, image_token_id: int, bos_id: int, eos_id: int) -> dict:
    text = {
        "model_type": "opt",
        "hidden_size": TEXT_HIDDEN,
        "word_embed_proj_dim": TEXT_HIDDEN,
        "ffn_dim": 1024,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": vocab_size,
        "max_position_embeddings": MAX_POSITIONS,
        "do_layer_norm_before": True,
        "activation_function": "relu",
        "enable_bias": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": 0,
    }
    # The vision tower is the heavy part on purpose (4 layers, width 384, 1,024 patches): the
    # encoder stall EPD removes must be visible next to a 2-layer LM.
    vision = {
        "model_type": "blip_2_vision_model",
        "hidden_size": VIT_HIDDEN,
        "intermediate_size": 4 * VIT_HIDDEN,
        "num_hidden_layers": 4,
        "num_attention_heads": 6,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-6,
        "qkv_bias": True,
    }
    qformer = {
        "model_type": "blip_2_qformer",
        "hidden_size": TEXT_HIDDEN,
        "intermediate_size": 4 * TEXT_HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "cross_attention_frequency": 1,
        "encoder_hidden_size": VIT_HIDDEN,
        "vocab_size": 512,
        "max_position_embeddings": 64,
        "layer_norm_eps": 1e-12,
    }
    return {
        "architectures": ["Blip2ForConditionalGeneration"],
        "model_type": "blip-2",
        "num_query_tokens": QUERY_TOKENS,
        "image_token_index": image_token_id,
        "text_config": text,
        "vision_config": vision,
        "qformer_config": qformer,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": 0,
    }


def build_tiny_vlm(out_dir: Path, force: bool = False) -> Path:
    """Write config, tokenizer and processor configs for the tiny BLIP-2 into OUT_DIR."""
    from tokenizers import AddedToken, Tokenizer

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file() and not force:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = build_tiny_model(Path(tmp) / "base")
        tok = Tokenizer.from_file(str(base / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<bos>", "<image>")])
    tok.save(str(out_dir / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    ids = {t: tok.token_to_id(t) for t in ("<bos>", "<image>", "<|im_end|>")}
    missing = [t for t, i in ids.items() if i is None]
    if missing:
        raise RuntimeError(f"tokenizer lacks {missing}")

    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "bos_token": "<bos>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    pre = {
        "image_processor_type": "BlipImageProcessor",
        "processor_class": "Blip2Processor",
        "do_resize": True,
        "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        "resample": 3,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
    }
    (out_dir / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    (out_dir / "processor_config.json").write_text(
        json.dumps(
            {"processor_class": "Blip2Processor", "num_query_tokens": QUERY_TOKENS}, indent=2
        )
        + "\n"
    )
    bos, eos = ids["<bos>"], ids["<|im_end|>"]
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos, "eos_token_id": eos}, indent=2) + "\n"
    )
    cfg = model_config(vocab, ids["<image>"], bos, eos)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")  # last: marks done
    return out_dir
