"""An engine cost model the router fits online from the streams it relays (issue 31 item 2).

The model is the affine step cost `predicted_ttft` prices routes with (policy/predicted_ttft.py,
profiles/cost.py `AffineStepCost`): one engine step costs

    a + b * tokens + c * attention pairs + d * decoding sequences + k * decode KV tokens

with theta = (a, b, c, d, k) in `TERMS` order. A router never sees a step, but every request it
relays gives it two sums of steps, each linear in theta:

* TTFT (admission to first token), with the router's own prediction of the queue at
  admission: P queued prefill tokens, u uncached tokens of this prompt, h cached, D decoding
  requests holding KV tokens, token budget B per step (`ttft_features`, the very formula
  `predict_ttft_s` evaluates, so the fit minimises the policy's own prediction error, the
  model's misfit included);
* the mean inter-token gap of its decode (first token to last, over output - 1 steps), with
  the time-averaged decode batch and KV tokens the router counted on that instance meanwhile,
  and the prefill tokens (and attention pairs) whose first token came from that instance in
  the same window, per step (`decode_features`).

`OnlineAffineFit` is recursive least squares (RLS) with exponential forgetting (Ljung and
Soderstrom, *Theory and Practice of Recursive Identification*, 1983; the standard form in
Haykin, *Adaptive Filter Theory*, ch. 10) on relative errors: each observation is weighted by
1 / max(observed, predicted), as `fit_step_cost` weights its grid, so a 50 s queue does not
outvote a hundred 0.2 s first tokens. It estimates a multiplier per coefficient of a prior
(a profile's fit when one is given, `GENERIC_PRIOR` otherwise), which keeps the five
unknowns on one scale (the raw ones span 1e-9..1e-2). Forgetting lets it follow drift; the
covariance is bounded by the prior's (a bound on its trace) so directions no request
excites do not wind up while traffic is one-sided. Multipliers are projected onto >= 0
(a step never gets cheaper with more work).

Decode observations and delivery bursts. Behind a real API server the stream does not reach
the router token by token: when the server's event loop falls behind the engine (vLLM merges
the pending outputs of a request, then sends them at once), a whole stream can arrive in one
burst, its first token late by the whole decode. On two vLLM CPU engines behind the proxy
(docs/policies.md, "predicted_ttft on real engines"; H2's two campaigns) 55-60% of
client-side gaps were under 0.1 ms, 14-16% of streams came as one burst of several events,
and 51-56% had fewer SSE events than tokens, so the router cannot count the steps a chunk
covers (per-chunk timing would need per-event token
counts the engine does not send). Such a stream's span reads ~0 over output - 1 steps. So
`OnlineAffineFit.observe_decode` drops (and counts, `dropped["decode_burst"]`, in the
snapshot and /metrics) a decode observation whose mean gap is below `gap_floor_s`: a tenth
of the fit's overhead estimate less two standard errors. Every step pays the overhead, so a
much shorter mean step is impossible under the model; the floor is 0 while the overhead is
uncertain, so an uninformed fit drops nothing. The simulator has no bursts
and its decode observations pass unchanged. A partly coalesced stream (first token late by
part of the decode) still reads short, and a burst's late first token still enters the TTFT
fit: neither can be told at the first token.

Relative errors (`rel_error`) divide by max(observed, predicted), as the weighting does, so
they lie in [0, 1]: a burst's gap of microseconds cannot print as thousands of percent.

`StreamObserver` turns the router's bookkeeping (`policy/fleet.py` `RouterState` calls it with
its tickets and instance views) into those observations; the simulator and the proxy run the
same code, and in the simulator the engine stays the truth: the observer sees only the times
at which first tokens and ends of streams reach the router. Nothing here imports from
`policy/` or `sim/` (the tickets and views are read by attribute).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

TERMS = ("overhead_s", "per_token_s", "per_attn_pair_s", "per_decode_seq_s", "per_kv_token_s")
# A prior for an engine with no profile: between the H20 and H100 fits of the Qwen3-30B-A3B
# profile (policy/predicted_ttft.py `fitted_cost`: a 15-25 ms step overhead, 9-70 us per
# token, 1-8e-9 s per attention pair, 0.1-0.2 ms per decoding sequence, ~1.6e-8 s per KV
# token read). Only its scale matters much: the fit moves each term by a multiplier.
GENERIC_PRIOR = (0.02, 3e-5, 3e-9, 1.5e-4, 2e-8)


def ttft_features(
    pending: float,
    uncached: float,
    cached: float,
    queued_context: float,
    decodes: float,
    decode_kv: float,
    budget: int,
) -> tuple[float, float, float, float, float]:
    """The TTFT `predict_ttft_s` predicts, as a vector x with TTFT = x . theta:

    steps = ceil((P + u) / (B - D)); TTFT = steps * (a + (b + d) * D + k * KV) + b * (P + u)
    + c * (P * ctx_q + u * (h + u / 2))."""
    work = pending + uncached
    steps = math.ceil(work / max(budget - decodes, 1))
    return (
        float(steps),
        steps * decodes + work,
        pending * queued_context + uncached * (cached + uncached / 2),
        steps * decodes,
        steps * decode_kv,
    )


def decode_features(
    decodes: float, decode_kv: float, prefill_tokens: float, prefill_pairs: float
) -> tuple[float, float, float, float, float]:
    """One decode step's mean time as x . theta, from the window's mean decode batch and KV
    tokens and the prefill tokens and attention pairs per step that rode in it."""
    return (1.0, decodes + prefill_tokens, prefill_pairs, decodes, decode_kv)


class OnlineAffineFit:
    """Recursive least squares for theta (module docstring), started at a prior.

    prior: theta to start from (`TERMS` order; a zero term starts at 0 on GENERIC_PRIOR's
    scale); forgetting: lambda in (0, 1], an observation's weight halves after
    ln 2 / -ln lambda later ones (0.995: ~140); prior_rel_sd: the prior's standard deviation
    as a fraction of each term (1.0: a 2x error is one sd); noise_rel_sd: the relative error
    of one observation assumed until residuals are seen."""

    def __init__(
        self,
        prior: Sequence[float] | None = None,
        forgetting: float = 0.995,
        prior_rel_sd: float = 1.0,
        noise_rel_sd: float = 0.3,
        floor_s: float = 1e-3,
    ) -> None:
        prior = tuple(GENERIC_PRIOR if prior is None else prior)
        if len(prior) != len(TERMS):
            raise ValueError(f"prior: {len(prior)} values, expected {len(TERMS)} ({TERMS})")
        if any(not math.isfinite(v) or v < 0 for v in prior):
            raise ValueError(f"prior: every term must be finite and >= 0, got {prior}")
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting: {forgetting} is not in (0, 1]")
        if prior_rel_sd <= 0 or noise_rel_sd <= 0 or floor_s <= 0:
            raise ValueError("prior_rel_sd, noise_rel_sd and floor_s must be > 0")
        self.prior = prior
        self.scale = np.array(
            [p if p > 0 else g for p, g in zip(prior, GENERIC_PRIOR, strict=True)]
        )
        self.m = np.array([1.0 if p > 0 else 0.0 for p in prior])
        self.P0 = np.eye(len(TERMS)) * (prior_rel_sd / noise_rel_sd) ** 2
        self.P = self.P0.copy()
        self._trace0 = float(np.trace(self.P0))
        self.forgetting = forgetting
        self.floor_s = floor_s
        self.noise_var = noise_rel_sd**2  # relative residual variance, tracked
        self.observations = 0
        self.by_kind: dict[str, int] = {}
        # a-priori relative error |y - x.theta| / y per kind, exponentially averaged
        self.rel_error: dict[str, float] = {}
        # observations refused as impossible under the model, by reason (`observe_decode`)
        self.dropped: dict[str, int] = {}
        self._coef: tuple[float, ...] = tuple(float(v) for v in self.scale * self.m)

    def predict(self, x: Sequence[float]) -> float:
        return float(np.dot(np.asarray(x, dtype=float) * self.scale, self.m))

    def update(self, x: Sequence[float], y: float, kind: str = "ttft") -> float | None:
        """Take one observation (features x, seconds y); returns its a-priori relative
        error, None when y is not a positive finite time (it is then ignored)."""
        if not (y > 0 and math.isfinite(y)):
            return None
        z = np.asarray(x, dtype=float) * self.scale
        pred = float(z @ self.m)
        w = 1.0 / max(pred, y, self.floor_s)
        zw = z * w
        e = (y - pred) * w
        lam = self.forgetting
        pz = self.P @ zw
        gain = pz / (lam + float(zw @ pz))
        self.m = np.maximum(self.m + gain * e, 0.0)
        self.P = (self.P - np.outer(gain, pz)) / lam
        tr = float(np.trace(self.P))
        if tr > self._trace0:  # anti-windup: no direction grows beyond the prior's
            self.P *= self._trace0 / tr
        self.noise_var = lam * self.noise_var + (1 - lam) * e * e
        rel = abs(y - pred) / max(y, pred)  # bounded by 1: a burst cannot read as 6000%
        old = self.rel_error.get(kind)
        self.rel_error[kind] = rel if old is None else 0.98 * old + 0.02 * rel
        self.observations += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        self._coef = tuple(float(v) for v in self.scale * self.m)
        return rel

    def gap_floor_s(self) -> float:
        """The shortest mean decode step the fit can believe: a tenth of its overhead
        estimate less two standard errors (>= 0). Every step pays the overhead, so a mean gap
        far below it is not a step time the model can produce; 0 while the overhead is
        uncertain. The tenth is a margin, not a fit: the overhead also absorbs whatever TTFT
        latency the model lacks (a 40 ms first token pushes a generic prior's 20 ms to 35 ms
        with a 6 ms sd in four requests, tests/proxy), and the whole bound would then drop
        the engine's true 10 ms gaps; bursts read microseconds, three orders below."""
        i = TERMS.index("overhead_s")
        return max(self._coef[i] - 2.0 * self.coefficient_sd()[i], 0.0) / 10

    def observe_decode(self, x: Sequence[float], span_s: float, steps: int) -> float | None:
        """A decode observation: `steps` steps took `span_s` between first token and end of
        stream as relayed. A mean gap below `gap_floor_s` is a delivery burst, not steps
        (module docstring): it is counted in `dropped["decode_burst"]` and not fitted."""
        y = span_s / steps
        if y < self.gap_floor_s():
            self.dropped["decode_burst"] = self.dropped.get("decode_burst", 0) + 1
            return None
        return self.update(x, y, "decode")

    def coefficients(self) -> tuple[float, ...]:
        """Current theta, `TERMS` order."""
        return self._coef

    def coefficient_sd(self) -> tuple[float, ...]:
        """Standard error of each term: the covariance sigma^2 P, in seconds units."""
        sd = np.sqrt(np.maximum(np.diag(self.P), 0.0) * self.noise_var) * self.scale
        return tuple(float(v) for v in sd)

    def snapshot(self) -> dict[str, Any]:
        """The fit's state for receipts and /metrics."""
        return {
            "coef": dict(zip(TERMS, self.coefficients(), strict=True)),
            "coef_sd": dict(zip(TERMS, self.coefficient_sd(), strict=True)),
            "rel_error": dict(self.rel_error),
            "observations": dict(self.by_kind),
            "dropped": dict(self.dropped),
        }


class _InstanceLike(Protocol):
    pending_prefill_tokens: int
    decode_requests: int
    decode_tokens: int


@dataclass(slots=True)
class _Flight:
    """What the observer keeps per request between its hooks (on the router's ticket)."""

    t_admit: float
    features: tuple[float, ...] | None  # TTFT features at admission; None: not observed
    t_first: float | None = None
    window: tuple[float, float, float, float] | None = None  # decode instance's sums then


class StreamObserver:
    """Feeds an `OnlineAffineFit` from the router's bookkeeping (`RouterState` hooks).

    budget: the engines' token budget per step (B in `ttft_features`). Per instance it keeps
    the time integrals of the decode batch and its KV tokens (advanced before each change)
    and the prefill tokens and attention pairs whose first token came from it, so a request's
    decode window can be read as differences. Disaggregated requests give decode
    observations only (their TTFT includes a transfer the affine step does not model)."""

    def __init__(
        self, fit: OnlineAffineFit, budget: int, ttft: bool = True, decode: bool = True
    ) -> None:
        if budget < 1:
            raise ValueError(f"budget: {budget} tokens per step, expected >= 1")
        self.fit, self.budget = fit, budget
        self.use_ttft, self.use_decode = ttft, decode
        self._last: list[float] = []
        self._int_d: list[float] = []
        self._int_kv: list[float] = []
        self._tok: list[float] = []
        self._pairs: list[float] = []

    def _grow(self, n: int) -> None:
        while len(self._last) < n:
            for a in (self._int_d, self._int_kv, self._tok, self._pairs):
                a.append(0.0)
            self._last.append(math.nan)

    def advance(self, index: int, instances: Sequence[_InstanceLike], now: float) -> None:
        """Integrate instance `index`'s decode batch up to `now` (call before it changes)."""
        self._grow(len(instances))
        last = self._last[index]
        if last == last and now > last:  # not NaN: integrated since `last`
            inst = instances[index]
            dt = now - last
            self._int_d[index] += inst.decode_requests * dt
            self._int_kv[index] += inst.decode_tokens * dt
        self._last[index] = now if last != last or now > last else last

    def admitted(self, ticket: Any, inst: _InstanceLike, now: float) -> None:
        """Routed: remember the queue the router predicts the request joins (before admit
        adds it), on the ticket."""
        d = ticket.decision
        feats = None
        if self.use_ttft and not d.disaggregated:
            feats = ttft_features(
                inst.pending_prefill_tokens,
                ticket.uncached_tokens,
                d.predicted_cached_tokens,
                ticket.request.input_tokens / 2,
                inst.decode_requests,
                inst.decode_tokens,
                self.budget,
            )
        ticket.observed = _Flight(now, feats)

    def first_token(self, ticket: Any, instances: Sequence[_InstanceLike], now: float) -> None:
        """First token relayed: a TTFT observation; the decode window opens (call before the
        request joins the decode batch)."""
        f: _Flight | None = ticket.observed
        if f is None or f.t_first is not None:
            return
        d = ticket.decision
        i = d.decode
        self.advance(i, instances, now)
        if f.features is not None:
            self.fit.update(f.features, now - f.t_admit, "ttft")
        u, h = ticket.uncached_tokens, d.predicted_cached_tokens
        self._tok[d.prefill] += u
        self._pairs[d.prefill] += u * (h + u / 2)
        f.t_first = now
        f.window = (self._int_d[i], self._int_kv[i], self._tok[i], self._pairs[i])

    def finished(
        self, ticket: Any, output_tokens: int, instances: Sequence[_InstanceLike], now: float
    ) -> None:
        """Stream ended: a decode observation (mean gap over output - 1 steps); call before
        the request leaves the decode batch."""
        f: _Flight | None = ticket.observed
        if f is None:
            return
        ticket.observed = None
        i = ticket.decision.decode
        self.advance(i, instances, now)
        if not self.use_decode or f.window is None or f.t_first is None or output_tokens < 2:
            return
        span = now - f.t_first
        if span <= 0:
            return
        steps = output_tokens - 1
        d0, kv0, tok0, pairs0 = f.window
        x = decode_features(
            (self._int_d[i] - d0) / span,
            (self._int_kv[i] - kv0) / span,
            (self._tok[i] - tok0) / steps,
            (self._pairs[i] - pairs0) / steps,
        )
        self.fit.observe_decode(x, span, steps)
