"""The contract between an engine model and hardware/model profiles: the simulated engine
runs it, and routing policies price routes with it (`AffineStepCost`).

The engine asks a profile one question per scheduler step: how long does a step take that
prefills these chunks and decodes this batch? Decode-only stretches are advanced in closed form,
so profiles also expose a decode step's time as an affine function of the batch's total KV
length (the only thing that changes from one decode step to the next).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class StepCost(Protocol):
    def step_s(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_batch: int,
        decode_kv_tokens: int,
    ) -> float:
        """Seconds for one engine step.

        prefill_chunks: (new tokens in this step's chunk, tokens already in KV before the chunk)
        per prefilling request; decode_batch: sequences decoding one token; decode_kv_tokens:
        the KV length summed over those sequences.
        """
        ...

    def decode_affine(self, decode_batch: int) -> tuple[float, float]:
        """(a, b) with a decode-only step of this batch costing a + b * decode_kv_tokens."""
        ...


@dataclass(frozen=True)
class AffineStepCost:
    """A step cost linear in tokens, attention pairs and KV read: enough for a small CPU model
    and for tests whose expected values must be computed by hand."""

    overhead_s: float = 0.0
    per_token_s: float = 0.0  # every scheduled token (prefill chunk tokens + decode tokens)
    per_attn_pair_s: float = 0.0  # prefill attention: chunk * (context + chunk / 2) pairs
    per_decode_seq_s: float = 0.0
    per_kv_token_s: float = 0.0  # decode attention: KV tokens read

    def step_s(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_batch: int,
        decode_kv_tokens: int,
    ) -> float:
        tokens = decode_batch
        pairs = 0.0
        for chunk, context in prefill_chunks:
            tokens += chunk
            pairs += chunk * (context + chunk / 2)
        return (
            self.overhead_s
            + self.per_token_s * tokens
            + self.per_attn_pair_s * pairs
            + (self.per_decode_seq_s * decode_batch + self.per_kv_token_s * decode_kv_tokens)
        )

    def decode_affine(self, decode_batch: int) -> tuple[float, float]:
        a = self.overhead_s + (self.per_token_s + self.per_decode_seq_s) * decode_batch
        return a, self.per_kv_token_s


@dataclass(frozen=True)
class EngineProfile:
    """What the simulator needs to know about one (hardware, model) pair."""

    hardware: str
    model: str
    cost: StepCost
    kv_bytes_per_token: int  # all layers, K and V: sizes KV transfers
    kv_capacity_tokens: int  # at the requested gpu_memory_utilization
    source: str  # how the numbers were obtained (measured file, derived by ratios, calibrated)
    # CPU hosts with no spare core: the step cost while another instance is mid-step (their
    # workers and frontends then share the cores); a step pays it for the time the two overlap.
    # None: instances never slow each other.
    contended_cost: StepCost | None = None
    # CPU hosts: every step's cost grows by this fraction per runnable thread of the host's
    # other processes (`sim.host_neighbour_threads`; calibrate/serving_fit.py fits it).
    # 0: no such term.
    background_slowdown: float = 0.0
    # CPU hosts: and every request reaches its engine this many seconds later per runnable
    # thread of other processes (the frontends wait for the cores too). 0: no such term.
    background_delay_s: float = 0.0
