"""A step cost linear in a few step features: the form `akvc calibrate` fits for a CPU engine.

    step = overhead + per_token * scheduled tokens + per_attn_pair * prefill attention pairs
           + per_prefill_seq * prefilling sequences + per_decode_seq * decode batch
           + per_kv_token * decode KV tokens

`per_prefill_seq` carries the fixed cost a request pays on its way to its first token (input
processing, output of the sampled token) that a pure per-token term cannot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields

FEATURES = (
    "overhead_s",
    "per_token_s",
    "per_attn_pair_s",
    "per_prefill_seq_s",
    "per_decode_seq_s",
    "per_kv_token_s",
)


def step_features(
    prefill_chunks: Sequence[tuple[int, int]], decode_batch: int, decode_kv_tokens: int
) -> tuple[float, ...]:
    """The step's features, in FEATURES order (the design-matrix row of a fit)."""
    tokens = decode_batch + sum(c for c, _ in prefill_chunks)
    pairs = sum(c * (ctx + c / 2) for c, ctx in prefill_chunks)
    return (1.0, tokens, pairs, len(prefill_chunks), decode_batch, decode_kv_tokens)


@dataclass(frozen=True)
class LinearStepCost:
    overhead_s: float = 0.0
    per_token_s: float = 0.0
    per_attn_pair_s: float = 0.0
    per_prefill_seq_s: float = 0.0
    per_decode_seq_s: float = 0.0
    per_kv_token_s: float = 0.0

    @classmethod
    def from_mapping(cls, coef: Mapping[str, object], where: str) -> LinearStepCost:
        values: dict[str, float] = {}
        for f in fields(cls):
            if f.name not in coef:
                raise ValueError(f"{where}: missing coefficient {f.name!r}")
            v = coef[f.name]
            if not isinstance(v, int | float) or v < 0:
                raise ValueError(f"{where}: coefficient {f.name!r} must be a number >= 0")
            values[f.name] = float(v)
        return cls(**values)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def step_s(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_batch: int,
        decode_kv_tokens: int,
    ) -> float:
        x = step_features(prefill_chunks, decode_batch, decode_kv_tokens)
        coef = (
            self.overhead_s,
            self.per_token_s,
            self.per_attn_pair_s,
            self.per_prefill_seq_s,
            self.per_decode_seq_s,
            self.per_kv_token_s,
        )
        return sum(c * v for c, v in zip(coef, x, strict=True))

    def decode_affine(self, decode_batch: int) -> tuple[float, float]:
        a = self.overhead_s + (self.per_token_s + self.per_decode_seq_s) * decode_batch
        return a, self.per_kv_token_s
