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
profile's own step cost (`profiles/`, the same one the simulator runs) to the affine form
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

Split candidates (`split: true`, off by default). Besides every colocated candidate i
(score_i = ttft_i + its prefill-side terms + its decode term), a split puts the prefill on P
and the decode on D != P, timed the way the simulator runs one (sim/fleet.py, sim/engine.py):
P prefills what it lacks and emits no token the client sees; only then is the request handed
to D, where it joins the back of D's waiting queue, reserves blocks for the KV it lacks, pulls
it, and gives the first token at the end of D's next step (the last prompt token recomputed
with D's decodes):

    split(P, D) = ttft_P + stall terms of P         P's queue + prefill (recompute stall as
                                                     above, on P's decodes)
                + queue_D                            what D has queued, still ahead of it
                + fixed + new_D * bytes_per_token / bandwidth      the pull of what D lacks
                + step_D * (2 if D decodes else 1)   D's first step, plus waiting out a step
                                                     in flight at admission and at landing
                + decode term of D                   (as for a colocated candidate)

queue_D is ttft_D for a prompt of 0 tokens. It is added, not overlapped with P's prefill: the
first form, max(ttft_P, queue_D) ("D drains its queue meanwhile"), underpredicted split
TTFT 2.1x at the median (Mooncake x0.7, seed 0: 4.6 s predicted, 13.6 s simulated), because
what the router sends D while P prefills is queued ahead of the handed-over request and the
router counts nothing on D until then; it made TTFT p90 worse than colocating
(docs/policies.md).
Serially, D's queue on arrival is taken to be what it is now (work arriving replaces work
drained). P is the argmin of its prefill-side score over the prefill-capable instances (the
best two are kept, for when the best is D), so the choice stays O(instances): no pairs are
scored. A split is taken only when its score is strictly below the best colocated one (on a
fleet with no colocating instance, always). The transfer numbers are parameters naming their
source: the simulator's `sim.kv_transfer_fixed_s` / `kv_transfer_gbps` and the profile's KV
bytes per token (`split_params_from_sim`), or a lifecycle `calibration.json` for real engines
(`split_params_from_calibration`). On a combined fleet a split can win only through the
decode term (a session being placed, whose decode-lightest instance prefills slowly) or a
stall term; a later turn on its own cache has no decode term, and colocating on P is then
never slower than splitting from P.

What it does not model: preemption when KV runs out, P's prefill queue growing while the pull
waits, and queued requests' true contexts. Without `split` a PD fleet (no colocating instance)
gets the colocated prediction for its prefill instance, as every colocating policy does.

Tiers below HBM (issue 29; `tier_pricing`, on by default, acts only when the cache view knows
tiers). A candidate's hit is then everything it holds in HBM, host memory or disk (all of it
context, none recomputed), and it pays the reload it would wait for: the bytes it holds below
HBM over its links plus what the router has already routed onto them, beyond the queue ahead
of it (`policy/tier_pricing.py`). No fixed credit per tier; the same terms reach the split
candidates through P's score. The receipt's hit stays the HBM hit; the host and disk tokens
are the decision's reloads.

Session openings (`opening`, default `turn`: today's). A request with no cache of its own fixes
where its session's later turns run, and the score above prices only this turn, with the instance's
state at this instant (a queued prefill that drains within one prefill weighs as much as a lasting
load). `lifetime` floors an opening's wait on each candidate at the stationary M/G/1 wait of the
sessions homed there, and its decode term at their Little's-law decode load (policy/session_load.py:
per session, observed later-turn work over observed turn period); `lifetime_replace` uses the
stationary terms instead of the instant's. Measured on every tiers cell
(docs/kv_tiers/study_followups.md, TraceLab part, section 7): neither closes the TraceLab gap to
sticky_least_loaded, and `lifetime_replace` is several times worse on Mooncake, whose openings the
current queue places well; both stay opt-in. `near_tie` keeps the instant's score and balances
sessions only among near-ties: with best the lowest score and band this opening's own prefill on an
idle instance (its uncached tokens on the best candidate, no queue, no decodes), the candidates
scoring at most best + band are near-ties, and the opening goes to the one with the fewest open
sessions homed there (`session_load.OpenSessions`: last routed turn there, no finish signal yet),
ties to the lower score. A queue that drains within one prefill is no reason to stack one more
session; a queue longer than that still decides (docs/kv_tiers/study_followups.md, TraceLab part,
section 9). `near_tie_ttft` applies the band to the score less its decode term and admits only
candidates whose decode term is no larger than the best's (section 10). Both close the TraceLab
gap and lose TTFT or E2E p90 on held-out workloads with long prompts, so both stay opt-in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from agentic_kvc.policy.base import (
    Decision,
    FleetView,
    InstanceView,
    NoHealthyInstance,
    RequestView,
)
from agentic_kvc.policy.calibrated_split import read_calibration
from agentic_kvc.policy.common import (
    ColocatingPolicy,
    StrictParams,
    argmin,
    colocated_candidates,
    uncached_tokens,
)
from agentic_kvc.policy.registry import register
from agentic_kvc.policy.session_load import OpenSessions, SessionLoad, stationary_wait_s
from agentic_kvc.policy.tier_pricing import link_speeds, reload_delays
from agentic_kvc.portable import round_significant
from agentic_kvc.profiles.cost import AffineStepCost, StepCost
from agentic_kvc.profiles.online import TERMS, OnlineAffineFit, StreamObserver

# The grid of step shapes the fit samples: one prefill chunk (tokens, context it attends to)
# riding with a decode batch (sequences, mean KV length each). It spans the agentic workloads'
# range (prompts to 160k tokens, up to 64 decodes) without being any workload.
_CHUNKS = (0, 256, 1024, 2048, 4096, 8192)
_CONTEXTS = (0, 4096, 16_384, 49_152, 131_072)
_DECODES = (0, 1, 8, 32, 64)
_DECODE_KV = (2048, 32_768)


class PredictedTTFTParams(StrictParams):
    hardware: str = Field(
        "h20",
        description="Profile whose step cost is fitted (a hardware name of profiles/). In the "
        "simulator, unset means the fleet's own (as do model and max_num_batched_tokens); the "
        "proxy has no profile of its engines and uses this default unless told.",
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
    split: bool = Field(
        False,
        description="Also score split candidates (prefill on P, decode on D != P) with the "
        "KV pull timed below, and split when that is predicted sooner. Off: colocate only.",
    )
    transfer_source: str = Field(
        "sim defaults: sim.kv_transfer_fixed_s 0.05, kv_transfer_gbps 200",
        description="Where the transfer numbers come from (split_params_from_sim / "
        "split_params_from_calibration write it).",
    )
    transfer_fixed_s: float = Field(0.05, ge=0, description="Fixed cost of one KV pull.")
    transfer_gbps: float = Field(200.0, gt=0, description="KV pull bandwidth, Gbit/s.")
    kv_bytes_per_token: float | None = Field(
        None, gt=0, description="KV bytes per token, all layers; None: the profile's."
    )
    tier_pricing: bool = Field(
        True,
        description="With a cache view that knows tiers below HBM: count host / disk hits as "
        "held (not recomputed) and add each candidate's reload time beyond its queue "
        "(policy/tier_pricing.py). False: HBM hits only, as without tiers.",
    )
    tier_host_h2d_gbps: float | None = Field(
        None, gt=0, description="Host-to-device GB/s for reloads; None: the hardware profile's."
    )
    tier_host_latency_s: float | None = Field(
        None, ge=0, description="Per-reload host latency (s); None: the profile's."
    )
    tier_disk_read_gbps: float | None = Field(
        None, gt=0, description="Disk read GB/s for reloads; None: the profile's."
    )
    tier_disk_latency_s: float | None = Field(
        None, ge=0, description="Per-reload disk latency (s); None: the profile's."
    )
    opening: Literal["turn", "lifetime", "lifetime_replace", "near_tie", "near_tie_ttft"] = Field(
        "turn",
        description="How a request that opens a session (no cache of its own) is priced. "
        "turn: by this turn alone. lifetime: its wait is at least the stationary M/G/1 wait "
        "that the sessions homed on the candidate bring back (policy/session_load.py), so a "
        "transient queue weighs less than a lasting load. lifetime_replace: that wait instead "
        "of the queue now. near_tie: among the candidates within this opening's own idle "
        "prefill time of the best score, the one with the fewest open sessions. "
        "near_tie_ttft: as near_tie, judged on the score less its decode term, among the "
        "candidates whose decode term is no larger than the best's. Colocated candidates only.",
    )
    cost_model: Literal["profile", "online"] = Field(
        "profile",
        description="profile: the coefficients are the profile's fit, fixed. online: they are "
        "fitted from the streams the router relays (profiles/online.py), started from the "
        "profile's fit (online_prior: profile) or a generic prior.",
    )
    cost_scale: dict[str, float] = Field(
        default_factory=dict,
        description="Multiplies the profile's fitted coefficients, by term (overhead_s, "
        "per_token_s, per_attn_pair_s, per_decode_seq_s, per_kv_token_s): a model wrong in a "
        "known way (benchmarks/policy_misspec.py). With cost_model online it scales the prior.",
    )
    online_prior: Literal["profile", "generic"] = Field(
        "profile", description="cost_model online: start from the profile's fit or a generic one."
    )
    online_forgetting: float = Field(
        0.995, gt=0, le=1, description="cost_model online: RLS forgetting factor (lambda)."
    )
    online_observe: Literal["both", "ttft", "decode"] = Field(
        "both",
        description="cost_model online: fit on each request's TTFT, its inter-token gaps, or both.",
    )

    @field_validator("opening")
    @classmethod
    def _opening_colocated(cls, v: str, info: Any) -> str:
        if v != "turn" and info.data.get("split"):
            raise ValueError(f"opening: {v} places colocated candidates only (split: false)")
        return v

    @field_validator("cost_scale")
    @classmethod
    def _known_terms(cls, v: dict[str, float]) -> dict[str, float]:
        for k, x in v.items():
            if k not in TERMS:
                raise ValueError(f"cost_scale: unknown term {k!r}; terms are {', '.join(TERMS)}")
            if not x > 0:
                raise ValueError(f"cost_scale: {k} scale {x} must be > 0")
        return v


@lru_cache(maxsize=16)
def fitted_cost(hardware: str, model: str) -> AffineStepCost:
    """The profile's step cost fitted to the affine form (cached: a fit takes ~10 ms)."""
    from agentic_kvc.profiles import get_profile  # the profile tables load lazily

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
    # Rounded: LAPACK's last bits depend on the processor's BLAS kernel (agentic_kvc.portable).
    a, b, c, d, k = (round_significant(max(float(v), 0.0)) for v in coef)
    return AffineStepCost(
        overhead_s=a, per_token_s=b, per_attn_pair_s=c, per_decode_seq_s=d, per_kv_token_s=k
    )


def scale_terms(cost: AffineStepCost, scale: dict[str, float]) -> AffineStepCost:
    """`cost` with its terms multiplied by `scale` (term name -> factor); `cost` itself when
    `scale` is empty."""
    if not scale:
        return cost
    return AffineStepCost(**{t: getattr(cost, t) * scale.get(t, 1.0) for t in TERMS})


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

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        p: PredictedTTFTParams = self.params  # type: ignore[assignment]
        self._cost = scale_terms(fitted_cost(p.hardware, p.model), p.cost_scale)
        # cost_model online: the fit, and the observer the backend attaches to its router
        # state (RouterState.observer); None keeps the profile's coefficients.
        self.fit: OnlineAffineFit | None = None
        self.stream_observer: StreamObserver | None = None
        if p.cost_model == "online":
            prior = None if p.online_prior == "generic" else [getattr(self._cost, t) for t in TERMS]
            self.fit = OnlineAffineFit(prior, forgetting=p.online_forgetting)
            self.stream_observer = StreamObserver(
                self.fit,
                p.max_num_batched_tokens,
                ttft=p.online_observe != "decode",
                decode=p.online_observe != "ttft",
            )
        self._fit_seen = -1
        # opening: lifetime: what each session brings back to its instance (session_load.py)
        self.session_load: SessionLoad | None = (
            SessionLoad() if p.opening in ("lifetime", "lifetime_replace") else None
        )
        # opening: near_tie: the open sessions each instance is home to
        self.open_sessions: OpenSessions | None = (
            OpenSessions() if p.opening in ("near_tie", "near_tie_ttft") else None
        )

    def cost(self) -> AffineStepCost:
        """The coefficients in use now (the online fit's, rebuilt when it has moved)."""
        fit = self.fit
        if fit is not None and fit.observations != self._fit_seen:
            self._fit_seen = fit.observations
            self._cost = AffineStepCost(*fit.coefficients())
        return self._cost

    def _receipt_fit(self, scores: dict[Any, Any]) -> None:
        """cost_model online: the coefficients this decision used, their standard errors,
        the fit's recent relative error, how many observations it has and, once it has
        dropped any, how many it dropped and why (receipt field `scores.cost_model`)."""
        fit = self.fit
        if fit is None:
            return
        scores["cost_model"] = {
            "coef": [float(f"{v:.4g}") for v in fit.coefficients()],
            "coef_sd": [float(f"{v:.3g}") for v in fit.coefficient_sd()],
            "rel_error": {k: round(v, 3) for k, v in fit.rel_error.items()},
            "observations": fit.observations,
        }
        if fit.dropped:  # decode observations refused as delivery bursts (profiles/online.py)
            scores["cost_model"]["dropped"] = dict(fit.dropped)

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        p: PredictedTTFTParams = self.params  # type: ignore[assignment]
        parts = _Parts(p, request, fleet, candidates, self.cost())
        pred = parts.pre
        self.reload_tiers = parts.tiers  # the chosen instance's reloads, in the decision
        if parts.decode:
            for i in candidates:
                pred[i.index] += parts.decode_s(i)
        unc = parts.unc
        if self.session_load is not None:
            return self._choose_lifetime(request, fleet, candidates, parts)
        best = argmin(
            candidates,
            lambda i: (pred[i.index], unc[i.index], i.num_requests),
            self.tie,
            len(fleet.instances),
        )
        scores: dict[Any, Any] = {k: round(v, 4) for k, v in pred.items()}
        reason = "min_predicted_ttft"
        if self.open_sessions is not None:
            best, reason = self._near_tie(request, fleet, candidates, parts, best, scores)
        self._receipt_fit(scores)
        return best, reason, scores

    def _near_tie(
        self,
        request: RequestView,
        fleet: FleetView,
        candidates: Sequence[InstanceView],
        parts: _Parts,
        best: InstanceView,
        scores: dict[Any, Any],
    ) -> tuple[InstanceView, str]:
        """`opening: near_tie`, after the lowest score (`best`): an opening goes to the
        candidate with the fewest open sessions among those whose score is within `band` of
        the best, band being this opening's own prefill on the best candidate when idle; ties
        to the lower score. A later turn keeps `best`. Every routed turn updates the open
        sessions; `scores` gains the band and the counts.

        `near_tie_ttft`: the band applies to the score less its decode term, and a
        near-tie's decode term must be no larger than the best's: the transient the band
        forgives is a queue ahead of this prefill, not the decode load the session joins."""
        p: PredictedTTFTParams = self.params  # type: ignore[assignment]
        opened = self.open_sessions
        assert opened is not None
        pred, unc, held = parts.pre, parts.unc, parts.held
        n = len(fleet.instances)
        reason = "min_predicted_ttft"
        if not _holds_own_cache(request, fleet, held, candidates):
            b = best.index
            band = predict_ttft_s(
                InstanceView(index=b), unc[b], held[b], 0.0, parts.cost, p.max_num_batched_tokens
            )
            if p.opening == "near_tie_ttft":
                # the decode terms `choose` added (recomputed here, for openings only)
                dec = {i.index: parts.decode_s(i) if parts.decode else 0.0 for i in candidates}
                db = dec[b]
                lim = pred[b] - db + band
                near = [
                    i
                    for i in candidates
                    if dec[i.index] <= db and pred[i.index] - dec[i.index] <= lim
                ]
            else:
                near = [i for i in candidates if pred[i.index] <= pred[b] + band]
            scores["band"] = round(band, 4)
            if len(near) > 1:
                count = opened.per_instance(fleet.affinity, n, exclude=request.session_id)
                scores["open_sessions"] = count
                pick = argmin(
                    near,
                    lambda i: (count[i.index], pred[i.index], unc[i.index], i.num_requests),
                    self.tie,
                    n,
                )
                if pick.index != b:
                    best, reason = pick, "near_tie_fewer_sessions"
        if request.session_id is not None:
            opened.observe(request.session_id, request.last_turn)
        return best, reason

    def _choose_lifetime(
        self,
        request: RequestView,
        fleet: FleetView,
        candidates: Sequence[InstanceView],
        parts: _Parts,
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        """`opening: lifetime`: an opening's wait on i is max(its queue now, the stationary
        wait W_i of the sessions homed on i); ties (every W_i infinite) go to the lower
        rho_i. Every turn routed feeds the session load (its gap, and its work on the
        chosen instance)."""
        p: PredictedTTFTParams = self.params  # type: ignore[assignment]
        load = self.session_load
        assert load is not None
        pred, unc, held, cost = parts.pre, parts.unc, parts.held, parts.cost
        budget = p.max_num_batched_tokens
        n = len(fleet.instances)
        opening = not _holds_own_cache(request, fleet, held, candidates)
        rho = [0.0] * n
        floor = p.opening == "lifetime"
        out = request.output_tokens
        if opening:
            rho, second, decoding, kv = load.load(
                fleet.now, fleet.affinity, n, exclude=request.session_id
            )
            for i in candidates:
                k = i.index
                wait = stationary_wait_s(rho[k], second[k])
                queue = predict_ttft_s(i, 0, 0, parts.ctx_q, cost, budget)
                extra = wait - queue
                if parts.decode:  # the decode term on the stationary decode load (Little)
                    now_s = parts.decode_s(i)
                    stat_s = out * (
                        cost.overhead_s
                        + (cost.per_decode_seq_s + cost.per_token_s) * (decoding[k] + 1)
                        + cost.per_kv_token_s * (kv[k] + request.input_tokens)
                    )
                    extra += max(stat_s - now_s, 0.0) if floor else stat_s - now_s
                pred[k] += max(extra, 0.0) if floor else extra
        best = argmin(
            candidates,
            lambda i: (pred[i.index], rho[i.index], unc[i.index], i.num_requests),
            self.tie,
            n,
        )
        if request.session_id is not None:
            b = best.index
            work = predict_ttft_s(InstanceView(index=b), unc[b], held[b], 0.0, cost, budget)
            ctx = request.input_tokens + out / 2
            dec = out * (cost.per_decode_seq_s + cost.per_token_s + cost.per_kv_token_s * ctx)
            load.observe(
                request.session_id,
                fleet.now,
                work + dec,
                pred[b],
                request.last_turn,
                decode_s=parts.decode_s(best),
                kv=ctx,
            )
        scores: dict[Any, Any] = {k: round(v, 4) for k, v in pred.items()}
        if opening:
            scores["rho"] = [round(r, 4) for r in rho]
        self._receipt_fit(scores)
        return best, "min_predicted_ttft_lifetime" if opening else "min_predicted_ttft", scores

    def _decide(self, request: RequestView, fleet: FleetView) -> Decision:
        p: PredictedTTFTParams = self.params  # type: ignore[assignment]
        if not p.split:
            return super()._decide(request, fleet)
        return self._decide_split(p, request, fleet)

    def _decide_split(
        self, p: PredictedTTFTParams, request: RequestView, fleet: FleetView
    ) -> Decision:
        """The best colocated candidate against the best split (module docstring), O(n)."""
        n = len(fleet.instances)
        healthy = fleet.healthy()
        pre_c = [i for i in healthy if i.can_prefill]
        dec_c = [i for i in healthy if i.can_decode]
        if not pre_c or not dec_c:
            raise NoHealthyInstance(
                f"{self.name}: no healthy instance can "
                f"{'prefill' if not pre_c else 'decode'} request {request.request_id}"
            )
        parts = _Parts(p, request, fleet, healthy, self.cost())
        unc, cached = parts.unc, parts.cached
        self.reload_tiers = parts.tiers
        dec = {i.index: parts.decode_s(i) if parts.decode else 0.0 for i in dec_c}
        colo = colocated_candidates(fleet)
        colo_s = {i.index: parts.pre[i.index] + dec[i.index] for i in colo}
        # P: the two best by prefill-side score (the second stands in when the best is D).
        ranked = sorted(
            pre_c,
            key=lambda i: (
                parts.pre[i.index],
                unc[i.index],
                i.num_requests,
                (i.index - self.tie.counter) % n,
            ),
        )[:2]
        split_s: dict[int, float] = {}
        split_p: dict[int, InstanceView] = {}
        for d in dec_c:
            pre = (
                ranked[0]
                if ranked[0].index != d.index
                else (ranked[1] if len(ranked) > 1 else None)
            )
            if pre is None:
                continue
            split_p[d.index] = pre
            split_s[d.index] = (
                parts.pre[pre.index]
                + parts.queue_s(d)
                + parts.transfer_s(d)
                + parts.first_step_s(d)
                + dec[d.index]
            )
        scores: dict[Any, Any] = {k: round(v, 4) for k, v in colo_s.items()}
        self._receipt_fit(scores)
        best_c = (
            argmin(colo, lambda i: (colo_s[i.index], unc[i.index], i.num_requests), self.tie, n)
            if colo
            else None
        )
        splittable = [d for d in dec_c if d.index in split_s]
        best_d = (
            argmin(
                splittable,
                lambda i: (split_s[i.index], unc[split_p[i.index].index], i.num_requests),
                self.tie,
                n,
            )
            if splittable
            else None
        )
        if best_d is not None and (best_c is None or split_s[best_d.index] < colo_s[best_c.index]):
            pre = split_p[best_d.index]
            scores["split"] = {
                "prefill": pre.index,
                "decode": best_d.index,
                "pred_s": round(split_s[best_d.index], 4),
                # its parts: P's ttft, D's queue, the pull, D's first step (s)
                "parts": [
                    round(x, 4)
                    for x in (
                        parts.ttft[pre.index],
                        parts.queue_s(best_d),
                        parts.transfer_s(best_d),
                        parts.first_step_s(best_d),
                    )
                ],
            }
            return self.decision(request, pre, best_d, "min_predicted_ttft_split", scores, cached)
        if best_c is None:
            raise NoHealthyInstance(f"{self.name}: no prefill peer for a decode-only fleet")
        return self.decision(request, best_c, best_c, "min_predicted_ttft", scores, cached)


class _Parts:
    """Per-candidate terms of the prediction (module docstring) for one request.

    `pre[i]`: ttft_i plus the prefill-side terms (recompute stall, and with objective
    ttft+stall / all the stall of its own prefill), summed in this order so that the
    colocated score `pre[i] + decode_s(i)` is the first versions' bit for bit."""

    def __init__(
        self,
        p: PredictedTTFTParams,
        request: RequestView,
        fleet: FleetView,
        candidates: Sequence[InstanceView],
        cost: AffineStepCost | None = None,
    ) -> None:
        self.p, self.request = p, request
        if cost is None:  # the profile's (the policy passes its own: online, or scaled)
            cost = scale_terms(fitted_cost(p.hardware, p.model), p.cost_scale)
        self.cost = cost
        self.cached = cached = fleet.cached_tokens(request)  # HBM: the receipt's hit
        # Tiers below HBM: what any tier holds is context, not recompute (tier_pricing.py).
        self.tiers = tiers = (
            fleet.tier_hits(request) if p.tier_pricing and fleet.knows_tiers else None
        )
        if tiers is not None:
            cached = [t.total for t in tiers]
        self.held = cached  # what each candidate holds in any tier (context, not recomputed)
        self.unc = unc = uncached_tokens(request, cached)
        self.ctx_q = ctx_q = request.input_tokens / 2
        budget = p.max_num_batched_tokens
        pred = {
            i.index: predict_ttft_s(i, unc[i.index], cached[i.index], ctx_q, cost, budget)
            for i in candidates
        }
        if tiers is not None and any(t.host or t.disk for t in tiers):
            # The reload each candidate would wait for beyond its queue (links asked only
            # when something is below HBM: a view without tiers needs no link numbers).
            links = link_speeds(
                p.hardware,
                p.tier_host_h2d_gbps,
                p.tier_host_latency_s,
                p.tier_disk_read_gbps,
                p.tier_disk_latency_s,
            )
            queue = [predict_ttft_s(i, 0, 0, ctx_q, cost, budget) for i in candidates]
            kvb = p.kv_bytes_per_token or profile_kv_bytes(p.hardware, p.model)
            for k, late in reload_delays(candidates, tiers, queue, kvb, links).items():
                pred[k] += late
        self.ttft = dict(pred) if p.split else pred
        self.decode = p.objective in ("ttft+decode", "all") and (
            p.decode_term == "always" or not _holds_own_cache(request, fleet, cached, candidates)
        )
        most = max(cached[i.index] for i in candidates)
        for i in candidates:
            if p.recompute_stall and i.decode_requests:
                h, w = cached[i.index], most - cached[i.index]
                redo = cost.per_token_s * w + cost.per_attn_pair_s * w * (h + w / 2)
                pred[i.index] += i.decode_requests * redo
            if p.objective in ("ttft+stall", "all"):
                own = predict_ttft_s(
                    InstanceView(index=i.index), unc[i.index], cached[i.index], ctx_q, cost, budget
                )
                pred[i.index] += i.decode_requests * own
        self.pre = pred

    def decode_s(self, i: InstanceView) -> float:
        """This request's decode time on i: output tokens x the decode step with it added."""
        cost = self.cost
        step = (
            cost.overhead_s
            + (cost.per_decode_seq_s + cost.per_token_s) * (i.decode_requests + 1)
            + cost.per_kv_token_s * (i.decode_tokens + self.request.input_tokens)
        )
        return self.request.output_tokens * step

    def queue_s(self, d: InstanceView) -> float:
        """D's queued prefill (a prompt of 0 tokens on D), still ahead when P hands over."""
        return predict_ttft_s(d, 0, 0, self.ctx_q, self.cost, self.p.max_num_batched_tokens)

    def transfer_s(self, d: InstanceView) -> float:
        """The pull of the prompt's KV that D lacks, as the simulator times it."""
        p = self.p
        per_token = p.kv_bytes_per_token or profile_kv_bytes(p.hardware, p.model)
        new_on_d = self.unc[d.index]
        return p.transfer_fixed_s + new_on_d * per_token * 8 / (p.transfer_gbps * 1e9)

    def first_step_s(self, d: InstanceView) -> float:
        """D's step that recomputes the last prompt token and gives the first one, plus
        waiting out a step in flight at admission and at landing (half a step each)."""
        step = self.cost.step_s(
            [(1, max(self.request.input_tokens - 1, 0))], d.decode_requests, d.decode_tokens
        )
        return step * (2 if d.decode_requests else 1)


@lru_cache(maxsize=16)
def profile_kv_bytes(hardware: str, model: str) -> int:
    from agentic_kvc.profiles import get_profile

    return get_profile(hardware, model).kv_bytes_per_token


def split_params_from_sim(
    hardware: str, model: str, kv_transfer_fixed_s: float, kv_transfer_gbps: float
) -> dict[str, Any]:
    """`split` parameters from the simulator's own transfer settings and profile."""
    return {
        "split": True,
        "hardware": hardware,
        "model": model,
        "transfer_source": f"sim.kv_transfer_fixed_s {kv_transfer_fixed_s}, kv_transfer_gbps "
        f"{kv_transfer_gbps}; KV bytes/token of profile {hardware}/{model}",
        "transfer_fixed_s": kv_transfer_fixed_s,
        "transfer_gbps": kv_transfer_gbps,
        "kv_bytes_per_token": float(profile_kv_bytes(hardware, model)),
    }


def split_params_from_calibration(path: str | Path, **overrides: Any) -> dict[str, Any]:
    """`split` parameters from a lifecycle `calibration.json` (akvc lifecycle run): its
    fitted transfer alpha (ms) and beta (ms per byte), and its KV bytes per token."""
    cal = read_calibration(path)
    beta = cal["transfer_beta_ms_per_byte"]
    if beta <= 0:
        raise ValueError(f"{path}: transfer_beta_ms_per_byte is {beta}: no bandwidth to use")
    out: dict[str, Any] = {
        "split": True,
        "transfer_source": f"{cal.get('source', path)} (lifecycle calibration.json)",
        "transfer_fixed_s": max(cal["transfer_alpha_ms"], 0.0) / 1e3,
        "transfer_gbps": 8 / (beta * 1e-3) / 1e9,
    }
    if cal.get("kv_bytes_per_token"):
        out["kv_bytes_per_token"] = float(cal["kv_bytes_per_token"])
    out.update(overrides)
    return out


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
