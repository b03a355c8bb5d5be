"""The locally built CPU model's shape: the `config.json` that serve/tiny_model.py writes into
the model directory, and from which the cost model sizes the model (profiles/models.py). Kept
here, below both, so that the cost model never imports the serving layer."""

from __future__ import annotations

VOCAB_SIZE = 8192
MAX_POSITIONS = 4096


def model_config() -> dict[str, object]:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": MAX_POSITIONS,
        "max_window_layers": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_sliding_window": False,
        "sliding_window": None,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
    }
