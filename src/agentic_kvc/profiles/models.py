"""Model shapes: what a profile needs to size weights, KV and the FLOPs/bytes of each operator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentic_kvc.profiles.tiny_model import model_config as tiny_model_config


@dataclass(frozen=True)
class ModelShape:
    name: str
    ops_name: str  # the model's name in the operator table (same architecture, other checkpoint)
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    ffn: int  # dense FFN width, or one expert's width for MoE
    experts: int = 0  # 0: dense
    top_k: int = 0
    tied_embeddings: bool = False
    dtype_bytes: int = 2  # bf16

    @classmethod
    def from_hf_config(cls, name: str, cfg: Mapping[str, Any]) -> ModelShape:
        """A dense model's shape from its Hugging Face `config.json` fields."""
        return cls(
            name,
            name,
            layers=cfg["num_hidden_layers"],
            hidden=cfg["hidden_size"],
            q_heads=cfg["num_attention_heads"],
            kv_heads=cfg["num_key_value_heads"],
            head_dim=cfg["head_dim"],
            vocab=cfg["vocab_size"],
            ffn=cfg["intermediate_size"],
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token."""
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def kv_bytes_per_token_layer(self) -> int:
        return 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each dense linear op of one layer (MoE experts excluded)."""
        q, kv = self.q_heads * self.head_dim, self.kv_heads * self.head_dim
        shapes = {"qkv_proj": (self.hidden, q + 2 * kv), "o_proj": (q, self.hidden)}
        if self.is_moe:
            shapes["router"] = (self.hidden, self.experts)
        else:
            shapes["gate_up_proj"] = (self.hidden, 2 * self.ffn)
            shapes["down_proj"] = (self.ffn, self.hidden)
        return shapes

    @property
    def params(self) -> int:
        per_layer = sum(i * o for i, o in self.linear_shapes().values())
        if self.is_moe:
            per_layer += self.experts * 3 * self.hidden * self.ffn
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + embeddings

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes


# Shapes from the models' public configs (see ../shared/calibration/README.md for the first two).
MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(
            "qwen3-coder-30b-a3b",
            "qwen3-30b-a3b",
            layers=48,
            hidden=2048,
            q_heads=32,
            kv_heads=4,
            head_dim=128,
            vocab=151_936,
            ffn=768,
            experts=128,
            top_k=8,
        ),
        ModelShape(
            "llama-3.1-8b",
            "llama-3.1-8b",
            layers=32,
            hidden=4096,
            q_heads=32,
            kv_heads=8,
            head_dim=128,
            vocab=128_256,
            ffn=14_336,
        ),
        # Qwen2.5-VL-3B's language model (public config.json); the EPD simulation's LM
        # (epd/sim.py), costed by the H100 operator table's "qwen2.5-vl-3b" rows.
        ModelShape(
            "qwen2.5-vl-3b",
            "qwen2.5-vl-3b",
            layers=36,
            hidden=2048,
            q_heads=16,
            kv_heads=2,
            head_dim=128,
            vocab=151_936,
            ffn=11_008,
            tied_embeddings=True,
        ),
        # The locally built CPU model: its shape is read from the config the builder writes.
        ModelShape.from_hf_config("tiny", tiny_model_config()),
    )
}
ALIASES = {"tiny-qwen2": "tiny", "qwen3-30b-a3b": "qwen3-coder-30b-a3b"}


def get_model(name: str) -> ModelShape:
    key = ALIASES.get(name, name)
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    return MODELS[key]
