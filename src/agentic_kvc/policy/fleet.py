"""The router's own bookkeeping of the fleet, shared by the real proxy and the simulator.

Both backends call the same four hooks in the life of a request, so a policy sees the same
kind of state whichever backend runs it:

    ticket = state.admit(request, decision)   # routed: prefill work is pending on P
    state.prefill_done(ticket)                # PD only: P finished, KV moves to D
    state.first_token(ticket)                 # prefill released; request now decodes on D
    state.finish(ticket, output_tokens)       # everything released

The last three take the time (`now`) when the backend has it; a policy that fits its cost
model online (`stream_observer`, profiles/online.py) is then called before each change, and
reads the TTFT and inter-token gaps off them. Without an observer `now` is unused.

Engine metrics (running, waiting, KV usage) are pushed in by whoever scrapes them, with the
time of the scrape so policies can tell stale values.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentic_kvc.policy.base import (
    Decision,
    FleetView,
    InstanceView,
    RequestView,
    Role,
    colocating,
)


class StreamObserverLike(Protocol):
    """What watches the streams the router relays (profiles/online.py `StreamObserver`): it
    is called before each change of the bookkeeping, with the time, when the backend gives
    one."""

    def admitted(self, ticket: Ticket, inst: InstanceView, now: float) -> None: ...

    def advance(self, index: int, instances: Sequence[InstanceView], now: float) -> None: ...

    def first_token(
        self, ticket: Ticket, instances: Sequence[InstanceView], now: float
    ) -> None: ...

    def finished(
        self, ticket: Ticket, output_tokens: int, instances: Sequence[InstanceView], now: float
    ) -> None: ...


class RecordingCacheView(Protocol):
    """A cache view the router updates itself on every routed prompt (the estimated view).
    It may also answer `tier_hits` (base.CacheView)."""

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]: ...

    def record(self, instance: int, block_hashes: Sequence[int], now: float) -> None: ...


@dataclass(slots=True)
class Ticket:
    request: RequestView
    decision: Decision
    uncached_tokens: int
    prefill_released: bool = False
    on_decode: bool = False
    finished: bool = False
    observed: Any = None  # a stream observer's note on this request (StreamObserver)
    # What the router asked the decode engine to do with the request's KV when it ends
    # (set by the backend that sends the ask): release it to the head of the free queue
    # (finished sessions first), after writing it below HBM (`store_below`: pause-aware
    # demotion). `finish` tells the estimated view, which cannot see the engine do it.
    release_first: bool = False
    store_below: bool = False
    # Or: hold it for this long, then demote it as above unless the session's next turn came
    # first (pause-aware placement's keep; `sim.engine.Instance._unhold`).
    demote_after_s: float | None = None


class RouterState:
    def __init__(
        self,
        n_instances: int,
        roles: Sequence[Role] | None = None,
        cache: RecordingCacheView | None = None,
        record_on_route: bool = True,
        max_sessions: int | None = None,
    ) -> None:
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1 or None, got {max_sessions}")
        roles = list(roles) if roles is not None else ["combined"] * n_instances
        self.instances = [InstanceView(index=i, role=roles[i]) for i in range(n_instances)]
        self.cache = cache
        # The exact view (KV events) learns from the engines; only the estimate records routes.
        self.record_on_route = record_on_route
        # Per session: the instance its last turn decoded on, and its turns so far. Kept in
        # least-recently-routed order; beyond `max_sessions` (None: no bound, as the simulator
        # runs) the oldest are forgotten, so a long-running proxy's memory stays bounded (a
        # forgotten session's next turn is routed as a new one; its cache is still found).
        self.affinity: dict[str, int] = {}
        self.session_turns: dict[str, int] = {}
        self.max_sessions = max_sessions
        self._scrape_t: list[float | None] = [None] * n_instances
        # Healthy colocating instances, kept between health changes (roles are fixed): a
        # policy does not filter the whole fleet per request.
        self._colocated: list[InstanceView] | None = None
        self._scraped_any = False
        self._scraped_together: float | None = None  # every instance's scrape time, if one
        # A policy that fits its cost model online watches the streams (None: nothing does;
        # the backend sets it from the policy's `stream_observer`).
        self.observer: StreamObserverLike | None = None
        # Held KV the engines will demote when the hold runs out (Ticket.demote_after_s):
        # per (instance, session) as an engine keys its holds, (deadline, prompt blocks);
        # and the deadlines in a heap.
        self._holds: dict[tuple[int, str], tuple[float, Sequence[int]]] = {}
        self._hold_heap: list[tuple[float, int, str]] = []

    def view(self, now: float) -> FleetView:
        if self._hold_heap:
            self._expire_holds(now)
        # A TTL-based cache view needs the clock at decision time, not only at record time.
        advance = getattr(self.cache, "advance", None)
        if advance is not None:
            advance(now)
        if self._scraped_together is not None:  # update_scrapes: one age for all
            age = now - self._scraped_together
            for inst in self.instances:
                inst.scrape_age_s = age
        elif self._scraped_any:  # else every age is None already
            for inst, t in zip(self.instances, self._scrape_t, strict=True):
                inst.scrape_age_s = None if t is None else now - t
        colocated = self._colocated
        if colocated is None:
            colocated = self._colocated = colocating(self.instances)
        return FleetView(
            instances=self.instances,
            cache=self.cache,
            affinity=self.affinity,
            session_turns=self.session_turns,
            now=now,
            colocated=colocated,
        )

    def admit(self, request: RequestView, decision: Decision, now: float = 0.0) -> Ticket:
        p = self.instances[decision.prefill]
        host, disk = decision.predicted_host_tokens, decision.predicted_disk_tokens
        # Tokens reloaded from a tier below HBM are not prefilled: they wait on the link.
        uncached = max(request.input_tokens - decision.predicted_cached_tokens - host - disk, 0)
        ticket = Ticket(request, decision, uncached)
        if self.observer is not None:
            self.observer.admitted(ticket, p, now)
        p.num_requests += 1
        p.pending_prefill_tokens += uncached
        if host or disk:
            p.pending_host_reload_tokens += host
            p.pending_disk_reload_tokens += disk
        sid = request.session_id
        if sid is not None:
            if self._holds:
                self._expire_holds(now)
                if not decision.disaggregated:  # back where it is held, in time: kept
                    self._holds.pop((decision.decode, sid), None)
            affinity = self.affinity
            if self.max_sessions is not None:
                affinity.pop(sid, None)  # re-inserted last: most recently routed
                if len(affinity) >= self.max_sessions:
                    oldest = next(iter(affinity))
                    del affinity[oldest]
                    self.session_turns.pop(oldest, None)
            affinity[sid] = decision.decode
            self.session_turns[sid] = self.session_turns.get(sid, 0) + 1
        if self.cache is not None and self.record_on_route:
            self.cache.record(decision.prefill, request.block_hashes, now)
            if decision.disaggregated:
                self.cache.record(decision.decode, request.block_hashes, now)
        return ticket

    def _release_prefill(self, t: Ticket) -> None:
        if not t.prefill_released:
            p = self.instances[t.decision.prefill]
            p.pending_prefill_tokens -= t.uncached_tokens
            # Its reloads are done by then (the engine waits for them before the prefill).
            p.pending_host_reload_tokens -= t.decision.predicted_host_tokens
            p.pending_disk_reload_tokens -= t.decision.predicted_disk_tokens
            t.prefill_released = True

    def _move_to_decode(self, t: Ticket) -> None:
        if t.on_decode:
            return
        d = self.instances[t.decision.decode]
        if t.decision.disaggregated:
            self.instances[t.decision.prefill].num_requests -= 1
            d.num_requests += 1
        d.decode_requests += 1
        d.decode_tokens += t.request.input_tokens
        t.on_decode = True

    def prefill_done(self, t: Ticket, now: float | None = None) -> None:
        """PD: the prefill instance is done; the request now belongs to the decode instance."""
        if self.observer is not None and now is not None:
            self.observer.advance(t.decision.decode, self.instances, now)
        self._release_prefill(t)
        self._move_to_decode(t)

    def first_token(self, t: Ticket, now: float | None = None) -> None:
        if self.observer is not None and now is not None:
            self.observer.first_token(t, self.instances, now)
        self._release_prefill(t)
        self._move_to_decode(t)

    def finish(self, t: Ticket, output_tokens: int = 0, now: float | None = None) -> None:
        if t.finished:
            return
        if self.observer is not None and now is not None:
            self.observer.finished(t, output_tokens, self.instances, now)
        self._release_prefill(t)
        if t.on_decode:
            d = self.instances[t.decision.decode]
            d.decode_requests -= 1
            d.decode_tokens -= t.request.input_tokens
            d.num_requests -= 1
        else:  # failed before any token: the request never left the prefill instance
            self.instances[t.decision.prefill].num_requests -= 1
        t.finished = True
        if t.release_first or t.demote_after_s is not None:  # (the proxy: --finish-first only)
            self._released(t, 0.0 if now is None else now)

    def _released(self, t: Ticket, now: float) -> None:
        """Tell the estimated view what the engine does with a finished request's KV (the
        ticket's ask): demote it now, or when its hold runs out (`_expire_holds`)."""
        if self.cache is None or not self.record_on_route or not hasattr(self.cache, "demote"):
            return
        if t.release_first:
            self.cache.demote(t.decision.decode, t.request.block_hashes, now, t.store_below)
        elif t.demote_after_s is not None and t.request.session_id is not None:
            deadline = now + t.demote_after_s
            key = (t.decision.decode, t.request.session_id)
            self._holds[key] = (deadline, t.request.block_hashes)
            heapq.heappush(self._hold_heap, (deadline, *key))

    def _expire_holds(self, now: float) -> None:
        """Demote, in deadline order, the held KV whose hold ran out by `now` (the engine
        did so then; the estimate needs it before its next answer)."""
        heap, holds = self._hold_heap, self._holds
        while heap and heap[0][0] <= now:
            deadline, instance, sid = heapq.heappop(heap)
            held = holds.get((instance, sid))
            if held is not None and held[0] == deadline:  # (else replaced or ended since)
                del holds[instance, sid]
                self.cache.demote(instance, held[1], deadline, True)  # type: ignore[union-attr]

    def set_healthy(self, instance: int, healthy: bool) -> None:
        self.instances[instance].healthy = healthy
        self._colocated = None

    def update_scrape(
        self,
        instance: int,
        now: float,
        running: int | None,
        waiting: int | None,
        kv_usage: float | None,
    ) -> None:
        inst = self.instances[instance]
        inst.engine_running, inst.engine_waiting, inst.kv_usage = running, waiting, kv_usage
        self._scrape_t[instance] = now
        self._scraped_any = True
        self._scraped_together = None

    def update_scrapes(
        self,
        now: float,
        running: Sequence[int | None],
        waiting: Sequence[int | None],
        kv_usage: Sequence[float | None],
    ) -> None:
        """`update_scrape` for every instance at once (a simulator scrapes them together)."""
        for inst, r, w, kv in zip(self.instances, running, waiting, kv_usage, strict=True):
            inst.engine_running, inst.engine_waiting, inst.kv_usage = r, w, kv
        self._scrape_t = [now] * len(self.instances)
        self._scraped_any = True
        self._scraped_together = now
