"""`predicted_ttft`: send each request where its first token is predicted to come soonest.

Per candidate instance i, with the router's own accounting (`InstanceView`) and the request's
cached prefix there (`fleet.cached_tokens`):

    work_i   = P_i + u_i          queued prefill tokens ahead (P) + this prompt's uncached ones (u)
    steps_i  = ceil(work_i / (B - D_i))     engine steps to get through them: each step's token
                                            budget B is shared with the D_i decoding requests
    ttft_i   = steps_i * (a + d * D_i + k * KV_i)      per-step overhead and the decodes riding
             + b * work_i                              every token through the layers
             + c * (P_i * ctx_q + u_i * (h_i + u_i / 2))   prefill attention (token x context)

and pick the argmin (ties: fewer uncached tokens, fewer requests, round-robin). h_i is the
cached prefix on i, KV_i the decoding requests' KV tokens, ctx_q the context the queued tokens
attend to, which the router does not know: it is taken as half this prompt (requests of one
workload look alike; a cold prompt's tokens attend to half of it on average).

The coefficients (a, b, c, d, k) are not guessed: they are a least-squares fit of the engine
profile's own step cost (`sim/profiles`, the same one the simulator runs) to the affine form
`AffineStepCost` over a grid of step shapes, relative error weighted, done once per profile
(`fit_step_cost`). No workload is seen by the fit, so every workload is held out. `B` is the
engine's `max_num_batched_tokens`. On a fleet without a profile (a real CPU engine), name the
calibrated `cpu-tiny`/`tiny` profile.

Which requests add their own decode time (`decode_term: placement`, default): only one that
holds no cache of its own, i.e. a new session or one whose cache is gone (its affinity
instance holds no more of the prompt than the least-cached candidate, so a system prompt
shared by every instance does not count). Such a request's placement decides where the
session's decodes run, so it is balanced on decode load. A later turn whose prefix sits on its
own instance is placed by predicted TTFT alone: a move would pay a certain recompute now (on
its TTFT and, every later turn, the hit it forfeits if it moves again) to fix a decode
imbalance that is transient (the running decodes finish) and that the next placements correct
at no recompute. It still leaves when its instance's queue makes staying slower. With
`always` (the first version) a chat turn's ~300-token decode on a busier batch outweighed
recomputing its ~2k-token prefix, and sessions moved every few turns (chat: TTFT p90 +45% vs
consistent_hash); docs/policies.md has the sweep.

The recompute's cost to others (`recompute_stall`, default on). Prefilling prompt tokens that
another candidate already holds is work the fleet would not otherwise do, and it rides in the
engine steps of the instance that does it, so every decode running there waits for it:

    stall_i  = D_i * (b * w_i + c * w_i * (h_i + w_i / 2)),   w_i = max_j h_j - h_i

(the marginal time of those w_i tokens with the fitted coefficients; the step overhead is
not counted, the decodes step anyway). Staying on the cache costs 0; a move costs it only on
an instance that is decoding, in proportion. Without it (the second version) the policy moved
sessions off their cache whenever the queue made that faster for the request alone: at high
load and high reuse the fleet's hit rate fell (0.43 vs 0.49 for sglang_cache_aware on 16
instances at 2 sessions/s), the extra prefill slowed every decode (TPOT p50 +25%), and E2E p90
rose 15% against the best peer. Prompt tokens no candidate holds are not counted: they must
be computed somewhere, and where is the decode term's and the queue's business.

What it does not model: preemption when KV runs out, PD transfers (on a PD fleet the same
prediction picks the prefill instance, as every colocating policy does), and queued requests'
true contexts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from pydantic import Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams, argmin, uncached_tokens
from agentic_kvc.policy.registry import register
from agentic_kvc.sim.cost import AffineStepCost, StepCost

# The grid of step shapes the fit samples: one prefill chunk (tokens, context it attends to)
# riding with a decode batch (sequences, mean KV length each). It spans the agentic workloads'
# range (prompts to 160k tokens, up to 64 decodes) without being any workload.
_CHUNKS = (0, 256, 1024, 2048, 4096, 8192)
_CONTEXTS = (0, 4096, 16_384, 49_152, 131_072)
_DECODES = (0, 1, 8, 32, 64)
_DECODE_KV = (2048, 32_768)


class PredictedTTFTParams(StrictParams):
    hardware: str = Field(
        "h20", description="Profile whose step cost is fitted (sim/profiles hardware name)."
    )
    model: str = Field("qwen3-coder-30b-a3b", description="... and model name.")
    max_num_batched_tokens: int = Field(
        8192, ge=1, description="The engines' token budget per step (B)."
    )
    objective: Literal["ttft", "ttft+decode", "ttft+stall", "all"] = Field(
        "ttft+decode",
        description="ttft: the predicted TTFT alone; ttft+decode: plus this request's decode "
        "time there (output tokens x the decode step with it added); ttft+stall: plus the stall "
        "its prefill causes the instance's decoding requests; all: both.",
    )
    decode_term: Literal["always", "placement"] = Field(
        "placement",
        description="Which requests add their decode time (objectives ttft+decode, all). "
        "placement: only one that holds no cache of its own (a new session, or one whose cache "
        "is gone); a session's later turn on its own cache is placed by TTFT (+stall) alone. "
        "always: every request (the first version, which moved chat sessions off their cache).",
    )

    recompute_stall: bool = Field(
        True,
        description="Add, per candidate, the stall its recompute causes: the instance's "
        "decoding requests x the prefill time of the prompt tokens another candidate "
        "already holds (work the fleet would not otherwise do). False: the second version.",
    )


@lru_cache(maxsize=16)
def fitted_cost(hardware: str, model: str) -> AffineStepCost:
    """The profile's step cost fitted to the affine form (cached: a fit takes ~10 ms)."""
    from agentic_kvc.sim.profiles import get_profile  # the profile tables load lazily

    return fit_step_cost(get_profile(hardware, model).cost)


def fit_step_cost(cost: StepCost) -> AffineStepCost:
    """Least-squares `AffineStepCost` for `cost` over the grid above, each sample weighted by
    1 / its time (relative error), coefficients clipped at 0 (a time never falls with work)."""
    rows, times = [], []
    for m in _CHUNKS:
        for ctx in _CONTEXTS if m else (0,):
            for dec in _DECODES:
                for kv in _DECODE_KV if dec else (0,):
                    if m == 0 and dec == 0:
                        continue
                    chunks = [(m, ctx)] if m else []
                    t = cost.step_s(chunks, dec, dec * kv)
                    pairs = m * (ctx + m / 2)
                    rows.append([1.0, m + dec, pairs, dec, dec * kv])
                    times.append(t)
    x, y = np.array(rows), np.array(times)
    w = 1.0 / y
    coef, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
    a, b, c, d, k = (max(float(v), 0.0) for v in coef)
    return AffineStepCost(
        overhead_s=a, per_token_s=b, per_attn_pair_s=c, per_decode_seq_s=d, per_kv_token_s=k
    )


def predict_ttft_s(
    inst: InstanceView,
    uncached: int,
    cached: int,
    queued_context: float,
    cost: AffineStepCost,
    budget: int,
) -> float:
    """The formula in the module docstring for one candidate."""
    work = inst.pending_prefill_tokens + uncached
    per_step_budget = max(budget - inst.decode_requests, 1)
    steps = math.ceil(work / per_step_budget)
    per_step = (
        cost.overhead_s
        + (cost.per_decode_seq_s + cost.per_token_s) * inst.decode_requests
        + cost.per_kv_token_s * inst.decode_tokens
    )
    attention = cost.per_attn_pair_s * (
        inst.pending_prefill_tokens * queued_context + uncached * (cached + uncached / 2)
    )
    return steps * per_step + cost.per_token_s * work + attention


@register
class PredictedTTFT(ColocatingPolicy):
    name = "predicted_ttft"
    Params = PredictedTTFTParams
    description = (
        "Ours: argmin of predicted TTFT = queued prefill + this prompt's uncached prefill, "
        "timed by the engine profile's step cost fitted to an affine form."
    )

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: PredictedTTFTParams = self.params  # type: ignore[assignment]
        cost = fitted_cost(p.hardware, p.model)
        cached = fleet.cached_tokens(request)
        unc = uncached_tokens(request, cached)
        ctx_q = request.input_tokens / 2
        pred = {
            i.index: predict_ttft_s(
                i, unc[i.index], cached[i.index], ctx_q, cost, p.max_num_batched_tokens
            )
            for i in candidates
        }
        decode = p.objective in ("ttft+decode", "all") and (
            p.decode_term == "always" or not _holds_own_cache(request, fleet, cached, candidates)
        )
        most = max(cached[i.index] for i in candidates)
        for i in candidates:
            if p.recompute_stall and i.decode_requests:
                h, w = cached[i.index], most - cached[i.index]
                redo = cost.per_token_s * w + cost.per_attn_pair_s * w * (h + w / 2)
                pred[i.index] += i.decode_requests * redo
            own = predict_ttft_s(
                InstanceView(index=i.index),
                unc[i.index],
                cached[i.index],
                ctx_q,
                cost,
                p.max_num_batched_tokens,
            )
            if p.objective in ("ttft+stall", "all"):
                pred[i.index] += i.decode_requests * own
            if decode:
                step = (
                    cost.overhead_s
                    + (cost.per_decode_seq_s + cost.per_token_s) * (i.decode_requests + 1)
                    + cost.per_kv_token_s * (i.decode_tokens + request.input_tokens)
                )
                pred[i.index] += request.output_tokens * step
        best = argmin(
            candidates,
            lambda i: (pred[i.index], unc[i.index], i.num_requests),
            self.tie,
            len(fleet.instances),
        )
        scores = {k: round(v, 4) for k, v in pred.items()}
        return best, "min_predicted_ttft", scores


def _holds_own_cache(
    request: RequestView, fleet: FleetView, cached: list[int], candidates: Sequence[InstanceView]
) -> bool:
    """Whether the request's session has an affinity instance among the candidates that still
    holds more of this prompt than the least-cached candidate: a cache of its own, not just a
    prefix every instance shares (a system prompt)."""
    home = fleet.affinity.get(request.session_id) if request.session_id else None
    if home is None or home not in {i.index for i in candidates}:
        return False
    return cached[home] > min(cached[i.index] for i in candidates)
