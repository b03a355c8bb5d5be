"""A GPU step cost composed from per-layer operator costs (measured or derived by ratios).

One engine step of a decoder-only model runs, per layer, the dense linears (and MoE) on every
scheduled token, prefill attention per prefilling chunk, and one decode-attention kernel over the
decode batch; then the LM head on the sequences that sample, plus a per-step framework overhead
(scheduler, input preparation, sampling) that the operator table cannot see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from agentic_kvc.profiles.models import ModelShape
from agentic_kvc.profiles.ops import Curve, OpRow, fit_affine

MS = 1e-3
# Not measured by the operator table: vLLM V1's CPU-side work per step and per scheduled
# sequence. Order of magnitude from public vLLM step traces (a few ms per step with CUDA graphs).
DEFAULT_STEP_OVERHEAD_S = 2e-3
DEFAULT_PER_SEQ_OVERHEAD_S = 1e-5
SMALL_CHUNK = 256  # prefill-attention rows start here; smaller chunks blend towards decode


@dataclass
class OpStepCost:
    """`StepCost` from an operator table for one model; times in seconds."""

    shape: ModelShape
    rows: Sequence[OpRow]
    step_overhead_s: float = DEFAULT_STEP_OVERHEAD_S
    per_seq_overhead_s: float = DEFAULT_PER_SEQ_OVERHEAD_S
    _linear: list[Curve] = field(init=False, repr=False)
    _lm_head: Curve = field(init=False, repr=False)
    _prefill: list[tuple[int, Curve]] = field(init=False, repr=False)
    _dec_a: Curve = field(init=False, repr=False)
    _dec_b: Curve = field(init=False, repr=False)

    def __post_init__(self) -> None:
        by_op: dict[str, list[OpRow]] = {}
        for r in self.rows:
            if r.model == self.shape.ops_name:
                by_op.setdefault(r.op, []).append(r)
        layer_ops = list(self.shape.linear_shapes())
        layer_ops += ["moe_ffn_grouped"] if self.shape.is_moe else []
        needed = [*layer_ops, "lm_head", "attn_prefill", "attn_decode"]
        missing = [op for op in needed if op not in by_op]
        if missing:
            raise ValueError(f"operator table lacks {missing} for model {self.shape.ops_name!r}")
        self._linear = [Curve([(r.m, r.ms * MS) for r in by_op[op]]) for op in layer_ops]
        self._lm_head = Curve([(r.m, r.ms * MS) for r in by_op["lm_head"]])
        chunks: dict[int, list[tuple[float, float]]] = {}
        for r in by_op["attn_prefill"]:
            chunks.setdefault(r.m, []).append((r.ctx, r.ms * MS))
        self._prefill = [(c, Curve(pts)) for c, pts in sorted(chunks.items())]
        # Decode attention is affine in the batch's total KV for a given batch (a KV read):
        # fit a + b * total per measured batch, interpolate a and b over the batch size.
        batches: dict[int, list[tuple[float, float]]] = {}
        for r in by_op["attn_decode"]:
            batches.setdefault(r.m, []).append((r.m * r.ctx, r.ms * MS))
        fits = {b: fit_affine(pts) for b, pts in batches.items()}
        self._dec_a = Curve([(b, ab[0]) for b, ab in fits.items()])
        self._dec_b = Curve([(b, ab[1]) for b, ab in fits.items()])
        self.linear_s = lru_cache(maxsize=65536)(self._linear_s)
        self.decode_affine = lru_cache(maxsize=4096)(self._decode_affine)  # type: ignore[method-assign]
        # Per batch size, asked at every mixed step: a dict hit instead of two interpolations.
        self.decode_attn = lru_cache(maxsize=4096)(self.decode_attn)  # type: ignore[method-assign]
        self._lm_head_s = lru_cache(maxsize=4096)(self._lm_head)
        # Per (chunk, context): a prompt's full chunks recur at the same contexts (after the
        # same cached system prompt), in every session and in every step of a prefill run.
        self.prefill_attn_s = lru_cache(maxsize=65536)(self.prefill_attn_s)  # type: ignore[method-assign]

    def _linear_s(self, tokens: int) -> float:
        """One layer's dense linears + MoE for `tokens` scheduled tokens."""
        return sum(c(tokens) for c in self._linear) if tokens > 0 else 0.0

    def decode_attn(self, batch: int) -> tuple[float, float]:
        """One layer's decode attention as (a, b): a + b * total KV tokens."""
        return self._dec_a(batch), self._dec_b(batch)

    def prefill_attn_s(self, chunk: int, context: int) -> float:
        """One layer's attention for `chunk` new tokens after `context` cached ones."""
        rows = self._prefill
        if chunk < SMALL_CHUNK:
            # Between a decode step of one sequence (chunk 1) and the smallest measured chunk.
            a, b = self.decode_attn(1)
            lo, hi = a + b * (context + 1), self.prefill_attn_s(SMALL_CHUNK, context)
            return lo + (hi - lo) * (chunk - 1) / (SMALL_CHUNK - 1)
        for i, (c, curve) in enumerate(rows):
            if chunk == c:
                return curve(context)
            if chunk < c:
                c0, curve0 = rows[i - 1]
                y0, y1 = curve0(context), curve(context)
                return y0 + (y1 - y0) * (chunk - c0) / (c - c0)
        # Above the largest chunk: attention grows with pairs; extend the last two rows linearly.
        (c0, cu0), (c1, cu1) = rows[-2], rows[-1]
        y0, y1 = cu0(context), cu1(context)
        return y1 + (y1 - y0) * (chunk - c1) / (c1 - c0)

    def _decode_affine(self, decode_batch: int) -> tuple[float, float]:
        if decode_batch <= 0:
            return self.step_overhead_s, 0.0
        a_att, b_att = self.decode_attn(decode_batch)
        layers = self.shape.layers
        a = (
            self.step_overhead_s
            + self.per_seq_overhead_s * decode_batch
            + layers * (self.linear_s(decode_batch) + a_att)
            + self._lm_head_s(decode_batch)
        )
        return a, layers * b_att

    def step_s(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_batch: int,
        decode_kv_tokens: int,
    ) -> float:
        if not prefill_chunks:
            a, b = self.decode_affine(decode_batch)
            return a + b * decode_kv_tokens
        tokens = decode_batch + sum(c for c, _ in prefill_chunks)
        seqs = decode_batch + len(prefill_chunks)
        attn = sum(self.prefill_attn_s(c, ctx) for c, ctx in prefill_chunks)
        if decode_batch > 0:
            a_att, b_att = self.decode_attn(decode_batch)
            attn += a_att + b_att * decode_kv_tokens
        return (
            self.step_overhead_s
            + self.per_seq_overhead_s * seqs
            + self.shape.layers * (self.linear_s(tokens) + attn)
            # Every prefilling sequence is charged one sampled row (exact for a final chunk).
            + self._lm_head_s(seqs)
        )
