"""Session-affinity baselines that agent routers and gateways ship (issue 29, item 3).

Neither reads a cache view: they keep a session on the instance that has its KV, by the
session key alone (an `x-session-id` header, as agent clients send it).

`sticky_least_loaded`: a session's first request goes to the instance with the fewest open
sessions (ties: fewer requests in flight, then round-robin), and every later request of the
session goes back there until the session's finish signal (`RequestView.last_turn`: the agent
framework says the task is done), which releases its slot; an instance that turned unhealthy
loses its sessions to the same choice. Counting open sessions rather than requests in flight
is the point of it on agentic traffic: between turns a session has nothing in flight (its tool
runs on the client), so a request count sees an idle instance that is about to get every one of
its sessions back (shared/notes/routing_anchors.md, field reports: closed-loop pacing). Without
a finish signal (`last_turn` None) a session is released after `idle_ttl_s` without a request.

`session_ttl`: session affinity with an idle TTL, as gateways configure it: requests with the
same session key go to the same target until the session has been idle for the TTL, after
which the next one is placed anew (AWS Bedrock AgentCore `StickinessConfiguration`: a session
identifier such as `$context.header.x-session-id` and an inactivity `timeout`; Cloudflare load
balancing `session_affinity: header`, idle TTL 1800 s by default). A new or expired session goes
to the instance with the fewest requests in flight (ties round-robin), the gateway's usual
least-request balancing.

Neither reads the cache view to choose; the receipt's predicted hit asks it about the chosen
instance only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams, argmin, candidate_at
from agentic_kvc.policy.registry import register


class StickyParams(StrictParams):
    idle_ttl_s: float | None = Field(
        None,
        gt=0,
        description="Release a session after this long without a request (None: only its "
        "finish signal releases it).",
    )


@register
class StickyLeastLoaded(ColocatingPolicy):
    name = "sticky_least_loaded"
    uses_tier_view = False  # routes on the HBM hit alone
    Params = StickyParams
    description = (
        "Agent-router baseline: a session sticks to its instance until its finish signal; "
        "new sessions go to the instance with the fewest open sessions."
    )

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self.home: dict[str, int] = {}  # open session -> its instance
        self.last_seen: dict[str, float] = {}
        self.open_sessions: dict[int, int] = {}  # instance -> open sessions there

    def _release(self, session: str) -> None:
        inst = self.home.pop(session)
        self.last_seen.pop(session, None)
        self.open_sessions[inst] -= 1

    def _expire(self, now: float) -> None:
        ttl = self.params.idle_ttl_s  # type: ignore[attr-defined]
        if ttl is None:
            return
        old = [s for s, t in self.last_seen.items() if now - t > ttl]
        for s in old:
            self._release(s)

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        self._expire(fleet.now)
        sid = request.session_id
        n = len(fleet.instances)
        home = self.home.get(sid) if sid is not None else None
        inst = candidate_at(candidates, n, home) if home is not None else None
        reason = "sticky"
        if inst is None:
            if home is not None:  # its instance cannot serve it now: placed again
                self._release(sid)  # type: ignore[arg-type]
            opened = self.open_sessions
            inst = argmin(
                candidates, lambda i: (opened.get(i.index, 0), i.num_requests), self.tie, n
            )
            reason = "new_session"
            if sid is not None:
                self.home[sid] = inst.index
                opened[inst.index] = opened.get(inst.index, 0) + 1
        if sid is not None:
            self.last_seen[sid] = fleet.now
            if request.last_turn:
                self._release(sid)
                reason += "+finish"
        scores = {i.index: self.open_sessions.get(i.index, 0) for i in candidates}
        return inst, reason, scores


class SessionTTLParams(StrictParams):
    ttl_s: float = Field(
        1800.0, gt=0, description="Idle time after which a session's affinity expires."
    )


@register
class SessionTTL(ColocatingPolicy):
    name = "session_ttl"
    uses_tier_view = False  # routes on the HBM hit alone
    Params = SessionTTLParams
    description = (
        "Gateway session affinity with an idle TTL: same session, same instance, until idle "
        "for ttl_s; new or expired sessions go to the fewest requests in flight."
    )

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self.home: dict[str, tuple[int, float]] = {}  # session -> (instance, last request)

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        ttl: float = self.params.ttl_s  # type: ignore[attr-defined]
        sid, now, n = request.session_id, fleet.now, len(fleet.instances)
        got = self.home.get(sid) if sid is not None else None
        inst = None
        reason = "least_requests"
        if got is not None:
            if now - got[1] <= ttl:
                inst = candidate_at(candidates, n, got[0])
                reason = "affinity" if inst is not None else "affinity_unhealthy"
            else:
                reason = "expired"
        if inst is None:
            inst = argmin(candidates, lambda i: (i.num_requests,), self.tie, n)
        if sid is not None:
            self.home[sid] = (inst.index, now)
        return inst, reason, {i.index: i.num_requests for i in candidates}
