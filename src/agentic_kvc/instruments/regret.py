"""Counterfactual regret of routing decisions, in the simulator.

For a sample of decisions (every Nth, or every decision of one route class), the fleet is
forked at the moment of the decision (`fork.py`; the run is deterministic, so the fork is what
the run would have done) and each alternative placement is run forward in its own fork:

- `policy`: the policy's own decision (this fork reproduces the original run);
- `affinity`: the instance that served the session's previous turn;
- `least_loaded`: fewest in-flight requests, then pending prefill tokens (the router's view);
- `best_cache`: the most prompt tokens really cached (the engines' block pools), then load;
- `split:P`: prefill on P, decode on the decode instance (where the fleet has PD roles).

Each fork runs until `horizon_s` past the decision and until the request is done; it reports
the request's TTFT and E2E and the fleet's mean TTFT over the requests that arrived in that
window (a request without a first token by the fork's end counts its wait so far, a lower
bound). Regret = the policy's outcome minus the best alternative's (so >= 0). Only the policy
object decides inside the forks: after the forced decision the same policy routes the rest,
so regret is that of one decision. The original run never sees the forks: its records are
byte-identical to a plain run's (tests/instruments/test_regret.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentic_kvc.config import RunConfig
from agentic_kvc.instruments.fork import ForkedFleet, Snapshot, forget, shared_objects
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.policy.base import Decision, FleetView, InstanceView, Policy, RequestView
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.sim.fleet import SessionRun, SimFleet, SimStats
from agentic_kvc.workload.model import Workload

METRICS = ("ttft_s", "e2e_s", "fleet_ttft_s")


@dataclass(slots=True)
class RegretSettings:
    every: int = 10  # fork at every Nth decision (0-based: decisions 0, N, 2N, ...)
    route_class: str | None = None  # or: every decision of this class (with `every` = 1)
    horizon_s: float = 10.0
    max_decisions: int | None = None  # stop forking after this many sampled decisions

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"regret: every must be >= 1, got {self.every}")
        if self.horizon_s < 0:
            raise ValueError(f"regret: horizon_s must be >= 0, got {self.horizon_s}")


def _load_key(i: InstanceView) -> tuple[int, int, int]:
    return (i.num_requests, i.pending_prefill_tokens, i.index)


def alternatives(
    request: RequestView, fleet: FleetView, decision: Decision, true_cached: Sequence[int]
) -> dict[str, tuple[int, int]]:
    """Name -> (prefill, decode) of each alternative, from what the router saw at the decision."""
    out: dict[str, tuple[int, int]] = {"policy": (decision.prefill, decision.decode)}
    both = [i for i in fleet.instances if i.healthy and i.can_prefill and i.can_decode]
    if request.session_id is not None:
        a = fleet.affinity.get(request.session_id)
        if a is not None and a < len(fleet.instances) and fleet.instances[a] in both:
            out["affinity"] = (a, a)
    if both:
        ll = min(both, key=_load_key).index
        out["least_loaded"] = (ll, ll)
        bc = min(both, key=lambda i: (-true_cached[i.index], *_load_key(i))).index
        out["best_cache"] = (bc, bc)
    if any(i.role != "combined" for i in fleet.instances):
        decodes = fleet.decode_candidates()
        for p in fleet.prefill_candidates():
            if decision.disaggregated:
                d = decision.decode
            else:
                others = [i for i in decodes if i.index != p.index]
                if not others:
                    continue
                d = min(others, key=_load_key).index
            if d != p.index:
                out[f"split:{p.index}"] = (p.index, d)
    return out


class _Forced:
    """The run's policy inside a fork: decides as always, but the first decision is replaced
    by `placement` (None: kept) and what the router saw is captured for the alternatives."""

    def __init__(
        self,
        inner: Policy,
        placement: tuple[int, int] | None,
        true_cached: Callable[[RequestView], list[int]],
    ) -> None:
        self.inner = inner
        self.placement = placement
        self.true_cached = true_cached
        self.first: Decision | None = None
        self.alternatives: dict[str, tuple[int, int]] = {}
        self.truth: list[int] = []

    def __getattr__(self, name: str) -> Any:  # name, params, uses_cache_view, ...
        return getattr(self.inner, name)

    def decide(self, request: RequestView, fleet: FleetView) -> Decision:
        decision = self.inner.decide(request, fleet)
        if self.first is not None:
            return decision
        self.first = decision
        self.truth = self.true_cached(request)
        self.alternatives = alternatives(request, fleet, decision, self.truth)
        if self.placement is None or self.placement == (decision.prefill, decision.decode):
            return decision
        p, d = self.placement
        return Decision(
            prefill=p,
            decode=d,
            route_class="PD" if p != d else "COLOCATED",
            reason="regret alternative",
            policy=decision.policy,
            predicted_cached_tokens=fleet.cached_tokens(request)[p],
        )


def _true_cached(fleet: SimFleet) -> Callable[[RequestView], list[int]]:
    def probe(request: RequestView) -> list[int]:
        cap = max(request.input_tokens - 1, 0)
        return [min(i.pool.count_hit(request.block_hashes) * i.bs, cap) for i in fleet.instances]

    return probe


def _outcome(fork: ForkedFleet, target: RequestRecord, t0: float, horizon_s: float) -> dict:
    end = fork.stopped_at
    window = [r for r in fork.records if t0 <= r.arrival_s <= t0 + horizon_s and not r.error]
    waits = [r.ttft_s if r.ttft_s is not None else max(end - r.arrival_s, 0.0) for r in window]
    return {
        "ttft_s": target.ttft_s,
        "e2e_s": target.e2e_s,
        "fleet_ttft_s": float(np.mean(waits)) if waits else None,
        "window_requests": len(window),
        "cached_tokens": target.cached_tokens,
    }


class RegretFleet(SimFleet):
    """A simulated run that forks at sampled decisions; `rows` holds one row per decision."""

    probes_pools = True  # the true cached prefix per instance, at each decision

    def __init__(
        self,
        config: RunConfig,
        workload: Workload,
        profile: EngineProfile,
        settings: RegretSettings | None = None,
    ) -> None:
        super().__init__(config, workload, profile)
        self.settings = settings or RegretSettings()
        self.rows: list[dict[str, Any]] = []
        self._decisions = 0
        self._shared = shared_objects(self)

    def run(self) -> SimStats:
        try:
            return super().run()
        finally:
            forget(self._shared)
            # The forks are cyclic garbage (hundreds of MB per run) and the run had the
            # collector off (`no_cycle_collection`, which moves survivors to the oldest
            # generation, rarely collected): a process running many regret runs (a benchmark)
            # would keep them all. One full pass frees them here.
            gc.collect()

    def _release(self, srun: SessionRun, k: int) -> None:
        n = self._decisions
        self._decisions += 1
        s = self.settings
        if n % s.every == 0 and (s.max_decisions is None or len(self.rows) < s.max_decisions):
            row = self._counterfactual(srun, k)
            if row is not None:
                self.rows.append(row)
        super()._release(srun, k)

    def _run_fork(
        self, snap: Snapshot, k: int, placement: tuple[int, int] | None
    ) -> tuple[_Forced, dict[str, Any] | None]:
        fork, srun = snap.fork()
        forced = _Forced(fork.policy, placement, _true_cached(fork))
        fork.policy = forced  # type: ignore[assignment]
        n_before = len(fork.records)
        fork._release(srun, k)
        if len(fork.records) == n_before or forced.first is None:
            return forced, None  # waits for its dependencies, or rejected: no decision
        target = fork.records[n_before]
        fork.run_until(self._now + self.settings.horizon_s, target)
        return forced, _outcome(fork, target, self._now, self.settings.horizon_s)

    def _counterfactual(self, srun: SessionRun, k: int) -> dict[str, Any] | None:
        snap = Snapshot(self, srun, self._shared, transient=("rows", "_shared"))
        probe, chosen = self._run_fork(snap, k, None)
        first = probe.first
        if chosen is None or first is None:
            return None
        if self.settings.route_class and first.route_class != self.settings.route_class:
            return None
        placements = probe.alternatives
        by_place: dict[tuple[int, int], dict[str, Any]] = {placements["policy"]: chosen}
        for place in placements.values():
            if place not in by_place:
                _f, got = self._run_fork(snap, k, place)
                if got is not None:
                    by_place[place] = got
        outcomes = {name: by_place[p] for name, p in placements.items() if p in by_place}
        req = srun.session.requests[k]
        row: dict[str, Any] = {
            "request_id": req.request_id,
            "session_id": req.session_id,
            "turn": req.turn,
            "t": self._now,
            "policy": first.policy or self.config.policy.name,
            "route_class": first.route_class,
            "reason": first.reason,
            "predicted_cached_tokens": first.predicted_cached_tokens,
            "true_cached_tokens": probe.truth,
            "scores": {str(i): v for i, v in first.scores.items()},
            "horizon_s": self.settings.horizon_s,
            "placements": {n: list(p) for n, p in placements.items()},
            "outcomes": outcomes,
        }
        for m in METRICS:
            vals = {n: o[m] for n, o in outcomes.items() if o[m] is not None}
            own = vals.get("policy")
            if own is None or not vals:
                row[f"regret_{m}"] = None
                row[f"best_{m}"] = None
                continue
            best = min(vals, key=lambda name: (vals[name], name != "policy"))
            row[f"regret_{m}"] = own - vals[best]
            row[f"best_{m}"] = best
        return row


def run_regret(
    config: RunConfig,
    workload: Workload,
    profile: EngineProfile,
    settings: RegretSettings | None = None,
) -> tuple[list[RequestRecord], list[dict[str, Any]]]:
    """Simulate `config` forking at sampled decisions: (the run's records, regret rows)."""
    fleet = RegretFleet(config, workload, profile, settings)
    fleet.run()
    return fleet.records, fleet.rows


@dataclass(slots=True)
class RegretGroup:
    policy: str
    route_class: str
    n: int
    mean: dict[str, float] = field(default_factory=dict)
    p90: dict[str, float] = field(default_factory=dict)
    share_above: dict[str, float] = field(default_factory=dict)
    winners: dict[str, int] = field(default_factory=dict)


def summarize_regret(
    rows: Sequence[dict[str, Any]], threshold_s: float = 0.05, metric: str = "ttft_s"
) -> list[RegretGroup]:
    """Per policy and route class (and "all"): mean and p90 regret per metric, the share of
    decisions whose regret exceeds `threshold_s`, and which alternative won on `metric`."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["policy"], r["route_class"]), []).append(r)
        groups.setdefault((r["policy"], "all"), []).append(r)
    out = []
    for (policy, cls), rs in sorted(groups.items()):
        g = RegretGroup(policy, cls, len(rs))
        for m in METRICS:
            vals = np.array([r[f"regret_{m}"] for r in rs if r[f"regret_{m}"] is not None])
            if len(vals):
                g.mean[m] = float(vals.mean())
                g.p90[m] = float(np.percentile(vals, 90))
                g.share_above[m] = float((vals > threshold_s).mean())
        for r in rs:
            w = r.get(f"best_{metric}")
            if w is not None:
                g.winners[w] = g.winners.get(w, 0) + 1
        out.append(g)
    return out


def costliest(
    rows: Sequence[dict[str, Any]], n: int = 5, metric: str = "ttft_s"
) -> list[dict[str, Any]]:
    key = f"regret_{metric}"
    ranked = sorted(
        (r for r in rows if r[key] is not None), key=lambda r: (-r[key], r["request_id"])
    )
    return ranked[:n]
