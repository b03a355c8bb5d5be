"""Forking a simulated fleet in the middle of its run.

The simulator is deterministic, so a copy of its state at a decision, run forward, is exactly
what the run would have done from there. A fork is a pickled copy of the fleet (the workload,
config and profile are shared, never copied: nothing mutates them) whose event loop goes on
from the copied heap and stops at a horizon. Only records still open at the fork (their
requests in flight) travel with it, so a fork costs O(in-flight state), not O(run so far).
"""

from __future__ import annotations

import io
import pickle
import sys
from collections.abc import Iterator
from typing import Any

from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload.model import Workload

# Shared objects by token, for unpickling: a pickled reference names (token, id(object)).
_SHARED: dict[int, dict[int, Any]] = {}


def _shared_ref(token: int, key: int) -> Any:
    return _SHARED[token][key]


class _Pickler(pickle.Pickler):
    """Pickles the shared objects as references. `reducer_override` (unlike `persistent_id`)
    is not called for ints, strings, lists, dicts and tuples, which are most of a fleet's
    state (block hashes), so the check costs little."""

    def __init__(self, file: io.BytesIO, shared: dict[int, Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared
        self.token = id(shared)
        _SHARED[self.token] = shared

    def reducer_override(self, obj: Any) -> Any:
        key = id(obj)
        if key in self.shared:
            return _shared_ref, (self.token, key)
        return NotImplemented


def forget(shared: dict[int, Any]) -> None:
    """Drop `shared` from the unpickling registry (its snapshots can no longer fork)."""
    _SHARED.pop(id(shared), None)


def shared_objects(fleet: SimFleet) -> dict[int, Any]:
    """What every fork shares with its origin: read-only inputs (workload, config, profile)."""
    objs: list[Any] = [fleet.workload, fleet.config, fleet.profile, fleet.profile.cost]
    # Step-cost models (they may hold caches that cannot be pickled; none changes in a run).
    objs += [getattr(fleet.profile, "contended_cost", None), *(i.cost for i in fleet.instances)]
    for s in fleet.workload.sessions:
        objs.append(s)
        objs.extend(s.requests)
    return {id(o): o for o in objs if o is not None}


class Snapshot:
    """A frozen copy of `fleet` (and `extra` objects of its graph) at this moment."""

    def __init__(
        self,
        fleet: SimFleet,
        extra: Any,
        shared: dict[int, Any],
        transient: tuple[str, ...] = (),
    ) -> None:
        records, samples = fleet.records, fleet.samples
        # The caller's own bookkeeping on the fleet (e.g. an instrument's results) stays out.
        kept = {name: getattr(fleet, name) for name in transient}
        for name in transient:
            setattr(fleet, name, None)
        # Finished records are never touched again: leave them behind (a fork reports on the
        # requests it runs, not on the past).
        fleet.records = [r for r in records if r.t_done is None and r.error is None]
        fleet.samples = []
        limit = sys.getrecursionlimit()
        # The block pools' free queues are linked lists: pickling recurses along them.
        sys.setrecursionlimit(max(limit, 200_000))
        try:
            buf = io.BytesIO()
            _Pickler(buf, shared).dump((fleet, extra))
        finally:
            sys.setrecursionlimit(limit)
            fleet.records, fleet.samples = records, samples
            for name, value in kept.items():
                setattr(fleet, name, value)
        self.data = buf.getvalue()
        self.shared = shared

    def fork(self) -> tuple[ForkedFleet, Any]:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 200_000))
        try:
            fleet, extra = pickle.loads(self.data)
        finally:
            sys.setrecursionlimit(limit)
        fleet.__class__ = ForkedFleet
        fleet.init_fork()
        return fleet, extra


class ForkedFleet(SimFleet):
    """A fleet copied mid-run: `run_until` continues its event loop to a horizon."""

    _seeding: bool
    _stop_t: float
    _target: RequestRecord | None
    stopped_at: float

    def init_fork(self) -> None:
        self._seeding = False
        self._stop_t = float("inf")
        self._target = None
        self.stopped_at = self._now

    def _push(self, t: float, kind: int, payload: Any) -> None:
        if not self._seeding:
            SimFleet._push(self, t, kind, payload)

    def _events(self) -> Iterator[tuple[float, int, Any]]:
        self._seeding = False  # run()'s seeding is over: from here on events are real
        for item in super()._events():
            t = item[0]
            target = self._target
            if t > self._stop_t and (target is None or target.t_done is not None or target.error):
                return  # a fork is never resumed: the popped event may go
            self.stopped_at = t
            yield item

    def run_until(self, stop_t: float, target: RequestRecord | None = None) -> None:
        """Run on from where the copy was taken, to `stop_t` and until `target` is done.

        `SimFleet.run` seeds the sessions (muted here: the copied heap already holds what
        is to come, and an empty workload seeds no session) and then drains the event heap.
        """
        self._stop_t = stop_t
        self._target = target
        workload = self.workload
        self.workload = Workload([])
        self._seeding = True
        try:
            self.run()
        finally:
            self.workload = workload
            self._seeding = False
