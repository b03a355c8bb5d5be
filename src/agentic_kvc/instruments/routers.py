"""Several router replicas in front of one simulated fleet.

Each of R replicas is a router of its own, as R proxy processes would be: its own policy
object, its own in-flight accounting (`RouterState`), its own estimated prefix index (fed only
the prompts it routed) and its own session affinity; all of them scrape the same engines.
With `policy.cache_view: exact` they share the exact view (KV events reach every replica).
Requests reach a replica by session (`spread="session"`: a stable hash of the session id, as a
sticky load balancer in front of the routers would) or at random per request
(`spread="random"`, seeded by the run's seed and the request id).

With R = 1 the single replica is the run's own router and the records are byte-identical to
a plain simulated run (tests/instruments/test_routers.py).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from agentic_kvc.config import RunConfig
from agentic_kvc.metrics.records import InstanceSample, RequestRecord
from agentic_kvc.policy.base import Decision, FleetView, InstanceView, RequestView
from agentic_kvc.policy.fleet import RouterState, Ticket
from agentic_kvc.policy.registry import get_policy
from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.sim.fleet import SessionRun, SimFleet, policy_params
from agentic_kvc.workload.model import Workload

Spread = Literal["session", "random"]


def _stable(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def pick_replica(spread: Spread, replicas: int, seed: int, request_id: str, session_id: str) -> int:
    """The replica a request reaches; the real two-proxy run (routers_real.py) uses the same
    choice, so a request goes to the same replica index in the simulator and on real engines."""
    if replicas == 1:
        return 0
    if spread == "session":
        return _stable(session_id) % replicas
    return _stable(f"{seed}:{request_id}") % replicas


class ReplicaStates:
    """R routers' states behind the one `state` the fleet talks to.

    The fleet calls `view`/`admit` for the request being routed (on the replica `current`),
    the lifecycle hooks with that request's ticket (on the replica that admitted it), and
    `update_scrape` for every replica. `instances` sums the replicas' in-flight accounting
    (what the fleet's samples record: the load all routers together have placed).
    """

    def __init__(self, replicas: list[RouterState]) -> None:
        self.replicas = replicas
        self.current = 0
        self._owner: dict[int, RouterState] = {}

    @property
    def state(self) -> RouterState:
        return self.replicas[self.current]

    @property
    def session_turns(self) -> dict[str, int]:
        return self.state.session_turns

    @property
    def cache(self) -> Any:
        return self.state.cache

    @property
    def instances(self) -> list[InstanceView]:
        if len(self.replicas) == 1:
            return self.replicas[0].instances
        out = []
        for views in zip(*(r.instances for r in self.replicas), strict=True):
            out.append(
                InstanceView(
                    index=views[0].index,
                    num_requests=sum(v.num_requests for v in views),
                    pending_prefill_tokens=sum(v.pending_prefill_tokens for v in views),
                )
            )
        return out

    def view(self, now: float) -> FleetView:
        return self.state.view(now)

    def admit(self, request: RequestView, decision: Decision, now: float = 0.0) -> Ticket:
        ticket = self.state.admit(request, decision, now)
        self._owner[id(ticket)] = self.state
        return ticket

    # `now` as RouterState takes it (a replica whose policy fits its cost model online needs it).
    def prefill_done(self, t: Ticket, now: float | None = None) -> None:
        self._owner[id(t)].prefill_done(t, now)

    def first_token(self, t: Ticket, now: float | None = None) -> None:
        self._owner[id(t)].first_token(t, now)

    def finish(self, t: Ticket, output_tokens: int = 0, now: float | None = None) -> None:
        owner = self._owner.pop(id(t))
        owner.finish(t, output_tokens, now)

    def set_healthy(self, instance: int, healthy: bool) -> None:
        for r in self.replicas:
            r.set_healthy(instance, healthy)

    def update_scrape(self, *args: Any) -> None:
        for r in self.replicas:
            r.update_scrape(*args)

    def update_scrapes(self, *args: Any) -> None:  # (SimFleet scrapes all instances at once)
        for r in self.replicas:
            r.update_scrapes(*args)


class RoutersFleet(SimFleet):
    """A simulated run with `replicas` routers (each request routed by one of them)."""

    def __init__(
        self,
        config: RunConfig,
        workload: Workload,
        profile: EngineProfile,
        replicas: int = 1,
        spread: Spread = "session",
    ) -> None:
        if replicas < 1:
            raise ValueError(f"routers: replicas must be >= 1, got {replicas}")
        if spread not in ("session", "random"):
            raise ValueError(f"routers: spread must be 'session' or 'random', got {spread!r}")
        super().__init__(config, workload, profile)
        base = self.state
        # Fresh copies of the fleet's own (still empty) router state: the engines (which the
        # exact view reads) are shared, never copied.
        memo: dict[int, Any] = {id(i): i for i in self.instances}
        memo[id(self.instances)] = self.instances
        states = [base] + [copy.deepcopy(base, dict(memo)) for _ in range(replicas - 1)]
        self.policies = [self.policy] + [
            get_policy(config.policy.name, policy_params(config)) for _ in range(replicas - 1)
        ]
        self.replica_states = ReplicaStates(states)
        self.state = self.replica_states  # type: ignore[assignment]
        self.spread = spread
        self.replica_of: dict[str, int] = {}

    def _pick(self, req_id: str, session_id: str) -> int:
        return pick_replica(self.spread, len(self.policies), self.config.seed, req_id, session_id)

    def _release(self, srun: SessionRun, k: int) -> None:
        req = srun.session.requests[k]
        r = self._pick(req.request_id, req.session_id)
        self.replica_states.current = r
        self.policy = self.policies[r]
        self.replica_of[req.request_id] = r
        super()._release(srun, k)


def run_routers(
    config: RunConfig,
    workload: Workload,
    profile: EngineProfile,
    replicas: int = 1,
    spread: Spread = "session",
) -> tuple[list[RequestRecord], list[InstanceSample], dict[str, int]]:
    fleet = RoutersFleet(config, workload, profile, replicas, spread)
    fleet.run()
    return fleet.records, fleet.samples, fleet.replica_of


def measures(
    records: Sequence[RequestRecord | dict[str, Any]],
    samples: Sequence[InstanceSample | dict[str, Any]],
) -> dict[str, Any]:
    """Herding, affinity loss, prefix-hit rate and TTFT of one run.

    - herding: over sample times with any load, max over instances of (running + waiting)
      divided by its mean over instances; the mean of that ratio (1 = perfectly even);
    - affinity loss: the share of a session's later turns prefilled on a different instance
      than its previous turn;
    - hit rate: cached prompt tokens / prompt tokens.
    """
    recs = [r if isinstance(r, dict) else r.to_dict() for r in records]
    smps = [s if isinstance(s, dict) else s.to_dict() for s in samples]
    ok = [r for r in recs if not r["error"]]
    ttft = np.array([r["ttft_s"] for r in ok if r["ttft_s"] is not None])
    by_t: dict[float, list[int]] = {}
    for s in smps:
        by_t.setdefault(s["t"], []).append((s["running"] or 0) + (s["waiting"] or 0))
    ratios = [max(v) / np.mean(v) for v in by_t.values() if sum(v) > 0]
    prev: dict[str, int | None] = {}
    moves = follow = 0
    for r in sorted(ok, key=lambda r: (r["session_id"], r["turn"])):
        sid = r["session_id"]
        if sid in prev:
            follow += 1
            moves += prev[sid] != r["prefill_instance"]
        prev[sid] = r["prefill_instance"]
    inp = sum(r["input_tokens"] for r in ok)
    return {
        "requests": len(recs),
        "errors": len(recs) - len(ok),
        "herding": float(np.mean(ratios)) if ratios else None,
        "affinity_loss": moves / follow if follow else None,
        "hit_rate": sum(r["cached_tokens"] for r in ok) / inp if inp else None,
        "ttft_p50_s": float(np.percentile(ttft, 50)) if len(ttft) else None,
        "ttft_p90_s": float(np.percentile(ttft, 90)) if len(ttft) else None,
    }
