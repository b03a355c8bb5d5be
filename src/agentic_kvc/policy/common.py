"""Helpers every policy shares: candidates, tie-breaking, LMetric scoring, request classes.

Kept in one place so that, for instance, "WARM" means the same thing in every record whatever
policy produced it, and every argmin breaks ties the same deterministic way.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentic_kvc.policy.base import (
    Decision,
    FleetView,
    InstanceView,
    NoHealthyInstance,
    Policy,
    PolicyParams,
    RequestView,
    TierHits,
    colocating,
)

RequestClass = Literal["WARM", "MEDIUM", "HEAVY"]


class StrictParams(PolicyParams):
    """Parameters of a policy that has some; frozen, as a policy shares them."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ClassParams(StrictParams):
    """The WARM / MEDIUM / HEAVY split of the adaptive-offload design (seed 002)."""

    heavy_threshold: int = Field(
        20_000, ge=1, description="HEAVY when new (uncached) tokens >= this (T)."
    )
    warm_hit_ratio: float = Field(
        0.5, ge=0, le=1, description="WARM when cached/input is above this ..."
    )
    warm_max_new_tokens: int = Field(
        5_000, ge=0, description="... or when new tokens are below this."
    )

    @model_validator(mode="after")
    def _ordered(self) -> ClassParams:
        if self.warm_max_new_tokens > self.heavy_threshold:
            raise ValueError(
                f"warm_max_new_tokens ({self.warm_max_new_tokens}) must not exceed "
                f"heavy_threshold ({self.heavy_threshold})"
            )
        return self


DEFAULT_CLASSES = ClassParams()


def classify(input_tokens: int, cached_tokens: int, p: ClassParams = DEFAULT_CLASSES) -> str:
    """WARM (hit ratio > warm_hit_ratio, or new < warm_max_new_tokens), else MEDIUM (new < T),
    else HEAVY. WARM is tested first, as in seed 002's table: a mostly cached prompt is WARM
    even if its uncached tail is long."""
    new = max(input_tokens - cached_tokens, 0)
    ratio = cached_tokens / input_tokens if input_tokens > 0 else 0.0
    if ratio > p.warm_hit_ratio or new < p.warm_max_new_tokens:
        return "WARM"
    if new < p.heavy_threshold:
        return "MEDIUM"
    return "HEAVY"


def route_class(request_class: str, disaggregated: bool) -> str:
    """Route class as recorded: WARM / MEDIUM / HEAVY_COLO when colocated, HEAVY_P2P when a
    HEAVY prefill runs elsewhere, WARM_P2P / MEDIUM_P2P when a lighter one does (static PD)."""
    if request_class == "HEAVY":
        return "HEAVY_P2P" if disaggregated else "HEAVY_COLO"
    return f"{request_class}_P2P" if disaggregated else request_class


def colocated_candidates(fleet: FleetView) -> Sequence[InstanceView]:
    """Healthy instances that can run both phases of a request (`can_prefill and can_decode`),
    as the router state keeps them between health changes, else filtered here. Read-only."""
    got = fleet.colocated
    return got if got is not None else colocating(fleet.instances)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


class RoundRobinTie:
    """The last tie-breaker: a counter that moves on every decision.

    Among otherwise equal instances, the first at or after the counter wins. Without it an
    idle fleet (all scores 0) would send every new session to instance 0 (LMetric's reported
    failure case).
    """

    def __init__(self) -> None:
        self.counter = 0

    def key(self, n: int) -> Callable[[InstanceView], int]:
        start = self.counter % n if n else 0
        return lambda inst: (inst.index - start) % n

    def advance(self) -> None:
        self.counter += 1


def candidate_at(
    candidates: Sequence[InstanceView], n_instances: int, index: int
) -> InstanceView | None:
    """The candidate with this instance index, if any: when every instance is a candidate
    (the common case), by position, without a pass over the fleet."""
    if len(candidates) == n_instances and 0 <= index < n_instances:
        inst = candidates[index]
        if inst.index == index:
            return inst
    return next((i for i in candidates if i.index == index), None)


def argmin(
    candidates: Sequence[InstanceView],
    key: Callable[[InstanceView], tuple[Any, ...]],
    tie: RoundRobinTie,
    n: int,
) -> InstanceView:
    if not candidates:
        raise NoHealthyInstance("no healthy instance can serve this request")
    start = tie.counter % n if n else 0  # RoundRobinTie.key, inlined (per candidate)
    return min(candidates, key=lambda i: (*key(i), (i.index - start) % n))


def lmetric_score(inst: InstanceView, uncached: int) -> int:
    """LMetric (arXiv 2603.15202): (pending prefill tokens + this prompt's uncached tokens) x
    requests in flight on the instance."""
    return (inst.pending_prefill_tokens + uncached) * inst.num_requests


def lmetric_pick(
    candidates: Sequence[InstanceView],
    uncached: Sequence[int],
    tie: RoundRobinTie,
    n: int,
) -> tuple[InstanceView, dict[int, int]]:
    """argmin LMetric score; ties by fewer uncached tokens, fewer requests, round-robin."""
    values = [
        (i.pending_prefill_tokens + uncached[i.index]) * i.num_requests  # lmetric_score
        for i in candidates
    ]
    best = _pick(candidates, values, uncached, tie, n)
    return best, dict(zip([i.index for i in candidates], values, strict=True))


def _pick(
    candidates: Sequence[InstanceView],
    values: Sequence[int],
    uncached: Sequence[int],
    tie: RoundRobinTie,
    n: int,
) -> InstanceView:
    """argmin(candidates, (score, uncached, requests), tie, n), `values` the scores in
    candidate order. The full key is built only for the candidates tied at the lowest score
    (a per-candidate key tuple is most of a large fleet's decision)."""
    if not candidates:
        raise NoHealthyInstance("no healthy instance can serve this request")
    low = min(values)
    if values.count(low) == 1:  # the common case, found at C speed
        return candidates[values.index(low)]
    tied = [i for i, v in zip(candidates, values, strict=True) if v == low]
    start = tie.counter % n if n else 0
    return min(tied, key=lambda i: (uncached[i.index], i.num_requests, (i.index - start) % n))


def cache_lb_pick(
    candidates: Sequence[InstanceView],
    uncached: Sequence[int],
    tie: RoundRobinTie,
    n: int,
) -> tuple[InstanceView, dict[int, int]]:
    """Token-level load balance with cache credit (seed 002's `pick_by_score`): argmin of
    ongoing tokens plus this prompt's uncached tokens there; ties: uncached, requests, RR."""
    values = [
        i.pending_prefill_tokens + i.decode_tokens + uncached[i.index]  # ongoing + uncached
        for i in candidates
    ]
    best = _pick(candidates, values, uncached, tie, n)
    return best, dict(zip([i.index for i in candidates], values, strict=True))


def least_decode_load(
    candidates: Sequence[InstanceView], tie: RoundRobinTie, n: int
) -> InstanceView:
    return argmin(
        candidates, lambda i: (i.decode_tokens, i.decode_requests, i.num_requests), tie, n
    )


def least_ongoing(candidates: Sequence[InstanceView], tie: RoundRobinTie, n: int) -> InstanceView:
    return argmin(candidates, lambda i: (i.ongoing_tokens, i.num_requests), tie, n)


def fresh_engine_value(value: int | float | None, inst: InstanceView, max_age_s: float) -> Any:
    """A scraped engine value, or None when it is missing or older than `max_age_s`."""
    if value is None or inst.scrape_age_s is None or inst.scrape_age_s > max_age_s:
        return None
    return value


Chooser = Callable[[Sequence[InstanceView]], tuple[InstanceView, str, dict[int, Any]]]


class ColocatingPolicy(Policy):
    """A policy that places a request on one instance, chosen by `choose`.

    Fleets whose healthy instances are all prefill-only or decode-only (a PD fleet) cannot
    colocate; then the same rule picks the prefill instance among prefill-capable ones and the
    decode instance is the least decode-loaded decode-capable one, so the policy still runs
    (reason suffixed `+pd_split`). A request no instance can serve raises NoHealthyInstance.
    """

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self.tie = RoundRobinTie()
        # Set by a tier-aware `choose` (issue 29): this decision's per-instance tier hits, so
        # the receipt names the host / disk tokens the chosen instance reloads.
        self.reload_tiers: Sequence[TierHits] | None = None

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        raise NotImplementedError

    def decide(self, request: RequestView, fleet: FleetView) -> Decision:
        self.reload_tiers = None
        try:
            return self._decide(request, fleet)
        finally:
            self.tie.advance()

    def _decide(self, request: RequestView, fleet: FleetView) -> Decision:
        cached = _CachedOn(request, fleet)
        cands = colocated_candidates(fleet)
        if cands:
            inst, reason, scores = self.choose(request, fleet, cands)
            return self.decision(request, inst, inst, reason, scores, cached)
        p_cands, d_cands = fleet.prefill_candidates(), fleet.decode_candidates()
        if not p_cands or not d_cands:
            raise NoHealthyInstance(
                f"{self.name}: no healthy instance can "
                f"{'prefill' if not p_cands else 'decode'} request {request.request_id}"
            )
        p, reason, scores = self.choose(request, fleet, p_cands)
        d = least_decode_load(d_cands, self.tie, len(fleet.instances))
        return self.decision(request, p, d, f"{reason}+pd_split", scores, cached)

    def decision(
        self,
        request: RequestView,
        p: InstanceView,
        d: InstanceView,
        reason: str,
        scores: dict[int, Any],
        cached: Sequence[int],
        request_class: str | None = None,
    ) -> Decision:
        """The receipt; the class is judged from the prefill instance's cache unless given,
        with this policy's own thresholds when its parameters carry them."""
        hit = cached[p.index]
        klass = self.params if isinstance(self.params, ClassParams) else DEFAULT_CLASSES
        cls = request_class or classify(request.input_tokens, hit, klass)
        out = Decision(
            prefill=p.index,
            decode=d.index,
            route_class=route_class(cls, p.index != d.index),
            reason=reason,
            policy=self.name,
            predicted_cached_tokens=hit,
            scores=scores,
        )
        if self.reload_tiers is not None:
            t = self.reload_tiers[p.index]
            out.predicted_host_tokens, out.predicted_disk_tokens = t.host, t.disk
        return out


class SeededColocatingPolicy(ColocatingPolicy):
    """A colocating policy whose rule draws from its own generator, seeded by its `seed`
    parameter: the same config makes the same draws, in the simulator and the proxy alike."""

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._rng = random.Random(self.params.seed)  # type: ignore[attr-defined]


class _CachedOn:
    """`fleet.cached_tokens(request)`, read per instance: a policy whose choice ignores the
    cache still names the chosen instance's predicted hit in its receipt, and that alone
    should not probe every instance of a large fleet. Indexing only."""

    __slots__ = ("fleet", "request")

    def __init__(self, request: RequestView, fleet: FleetView) -> None:
        self.request, self.fleet = request, fleet

    def __getitem__(self, index: int) -> int:
        return self.fleet.cached_tokens_on(self.request, index)


def uncached_tokens(request: RequestView, cached: Sequence[int]) -> list[int]:
    """max(input - cached, 0) per instance (without a max() call each)."""
    n = request.input_tokens
    return [n - c if c < n else 0 for c in cached]


class CacheLBPolicy(ColocatingPolicy):
    """A colocating policy whose default placement is seed 002's cache/load-balance choice
    (`cache_lb_pick`); `adaptive` and `elastic` build their HEAVY handling on top of it."""

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        unc = uncached_tokens(request, fleet.cached_tokens(request))
        best, scores = cache_lb_pick(candidates, unc, self.tie, len(fleet.instances))
        return best, "cache_lb", scores
