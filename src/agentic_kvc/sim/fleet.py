"""The fleet event loop: sessions release requests, the policy routes them, instances step.

The router side is the real proxy's: a `RouterState` with its own in-flight accounting, engine
metrics pushed in by scrapes every `sim.scrape_interval_s` (0: fresh at every decision), and
the estimated prefix index (recorded on every route) or the exact view (the engines' own block
tables, as KV events would report them). Policies come from the registry unchanged.

Events at the same time run in a fixed order (KV landed, request released, step ended, scrape,
sample) and then every instance whose step ended plans its next one, so a step boundary sees
everything that arrived up to and including its time. Ties break by insertion order: the same
config and seed give the same records.

A CPU profile with no spare core (`EngineProfile.contended_cost`) makes instances slow each
other down: a step runs at the contended rate while another instance is mid-step and at the
base rate otherwise; when another step starts or ends, the step in progress is stretched or
shrunk for its remaining part (a decode run is cut there first).
"""

from __future__ import annotations

import gc
import heapq
import random
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agentic_kvc.cache.prefix_index import ExactPrefixIndex
from agentic_kvc.cache.tier_index import estimated_view
from agentic_kvc.cache.tier_store import walk_stores_at_free
from agentic_kvc.config import ConfigError, FleetConfig, KVTiersConfig, RunConfig
from agentic_kvc.metrics.records import InstanceSample, RequestRecord
from agentic_kvc.policy.base import NoHealthyInstance, RequestView, TierHits
from agentic_kvc.policy.fleet import RouterState, Ticket
from agentic_kvc.policy.pause import PauseEstimator
from agentic_kvc.policy.registry import get_policy, with_fleet_defaults
from agentic_kvc.profiles.cost import EngineProfile, StepCost
from agentic_kvc.profiles.fitted import under_background
from agentic_kvc.profiles.hardware import TierLinks, tier_links
from agentic_kvc.sim.engine import KV_NEEDS_BLOCKS, Instance, Seq, kv_usages
from agentic_kvc.sim.tiers import FleetTiers
from agentic_kvc.workload.model import Block, Request, Session, Workload, live_dependencies
from agentic_kvc.workload.tokens import chain_states, engine_block_hashes

# Event kinds, in the order they run at equal times (SUBMIT: a request through the frontends).
KV_LANDED, RELEASE, STEP_END, SCRAPE, SAMPLE, PLAN, SUBMIT = range(7)


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Run with the cyclic garbage collector off (its previous state restored afterwards).

    A run allocates millions of objects that either live to its end (records, samples, hash
    lists) or die by reference count: it makes no reference cycles (a finished request's
    flight drops its sequences; `tests/sim/test_sim_gc.py` checks that a run leaves nothing
    for the collector), so the collector's passes over the live objects find nothing. They
    took about a fifth of a 128-instance long-context run with the default thresholds, and
    a tenth with the young generation 20,000 allocations deep (issue 16).

    On the way out the run's survivors join the oldest generation without a pass
    (`gc.freeze` then `gc.unfreeze`, which also zeroes the young generation's count): else
    the first allocation after `gc.enable` collects the young generation, i.e. everything the
    run allocated, visiting every hash in every list still held (agentic-long, dynamo_kv,
    seed 1, in benchmarks/sim_tiers_overhead.py: 0.02 s of 0.65 s HBM only, 0.045 s of
    1.2 s with a 128 GiB host tier, whose stores hold millions). They are still collected by
    the next full collection. Skipped when objects are frozen already (a caller's
    `gc.freeze`, which `unfreeze` would undo).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class ExactCacheView:
    """The engines' real prefix caches, as a router fed by KV events would see them."""

    def __init__(self, instances: list[Instance]) -> None:
        self.instances = instances

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        return [
            inst.pool.count_hit(request.block_hashes) * inst.bs
            for inst in self.instances[:n_instances]
        ]

    def record(self, instance: int, block_hashes: Any, now: float) -> None:  # never called
        pass


class TieredExactCacheView(ExactCacheView):
    """The exact view of a fleet with KV tiers: also where each instance holds a prompt below
    HBM, from the KV events the tier stores publish with their `medium` (sim/tiers.py), kept
    by the proxy's own event index (`cache.prefix_index.ExactPrefixIndex`, keyed by the
    engine's hashes, which in the simulator are the router's keys). HBM is read from the
    pools, as `ExactCacheView` does. `Instance.tier_hits` reads the stores directly: the same
    answer, tests/sim/test_sim_tier_events.py."""

    def __init__(self, instances: list[Instance], tiers: FleetTiers) -> None:
        super().__init__(instances)
        self.events = ExactPrefixIndex(len(instances), instances[0].bs, engine_keys=True)
        tiers.publish(self.events.apply)

    def tier_hits(self, request: RequestView, n_instances: int) -> list[TierHits]:
        hashes = request.block_hashes
        host, disk = self.events.tiers["host"], self.events.tiers["disk"]
        out = []
        for i, inst in enumerate(self.instances[:n_instances]):
            m = inst.pool.count_hit(hashes)
            h = host.held_from(i, hashes, m)
            d = disk.held_from(i, hashes, m + h)
            bs = inst.bs
            out.append(TierHits(m * bs, h * bs, d * bs))
        return out


@dataclass(slots=True, eq=False)
class Flight:
    """One request from release to done."""

    request: Request
    record: RequestRecord
    ticket: Ticket
    session: SessionRun
    prefill_seq: Seq | None = None  # PD only
    decode_seq: Seq | None = None


@dataclass(slots=True, eq=False)
class SessionRun:
    session: Session
    next_turn: int = 0
    pending: int = 0  # open loop: released and not done
    # A subagent runs inside its parent's slot (a capped parent waiting on its subagents
    # would otherwise deadlock), so only top-level sessions take one.
    takes_slot: bool = True
    # The last released prompt's content blocks, engine block hashes and chain states (bases
    # and states, `chain_states`): the next turn's prompt extends it, its shared blocks keep
    # their hashes and states.
    last_prompt: tuple[tuple[Block, ...], list[int], list[int], list[int]] | None = None


@dataclass(slots=True)
class SimStats:
    events: int = 0
    steps: int = 0
    sim_s: float = 0.0
    transfers: int = 0
    transfer_s: float = 0.0  # modelled KV pull time, summed (records carry D's whole wait)
    reloads: int = 0  # loads from a KV tier below HBM
    reload_s: float = 0.0  # their waits (queue and transfer), summed


def policy_params(config: RunConfig) -> dict[str, Any]:
    """The run's policy parameters, with the fleet's hardware, model and step budget where the
    policy has such a parameter and the config does not set it (`with_fleet_defaults`)."""
    fc = config.fleet
    fleet = {
        "hardware": fc.hardware,
        "model": fc.model,
        "max_num_batched_tokens": fc.max_num_batched_tokens,
    }
    return with_fleet_defaults(config.policy.name, config.policy.params, fleet)


class SimFleet:
    # Subclasses that read an instance's pool between its steps (count_hit, usage: the
    # cache-error and regret instruments) set this: planned-at-once prefill runs (engine.py)
    # would show them the pool at the run's end.
    probes_pools = False

    def __init__(
        self,
        config: RunConfig,
        workload: Workload,
        profile: EngineProfile,
        closed_form: bool = True,
    ) -> None:
        fc = config.fleet
        self.config = config
        self.workload = workload
        # The host's other processes slow a CPU profile with a background term (else a no-op):
        # its steps, and the frontends that pass each request to its engine.
        background = config.sim.host_neighbour_threads
        self.ingress_s = profile.background_delay_s * background
        # Each request's wait is drawn (exponential, this mean): a frontend thread waits for a
        # core behind a neighbour a varying number of times. Own stream, seeded by the run.
        self._ingress_rng = random.Random(f"ingress-{config.seed}")
        profile = under_background(profile, background)
        self.profile = profile
        self.bs = fc.block_size
        capacity = fc.kv_cache_tokens or profile.kv_capacity_tokens
        self.num_blocks = capacity // self.bs
        if self.num_blocks < 1:
            raise ConfigError(
                f"field 'fleet.kv_cache_tokens': {capacity} tokens is less than one block of "
                f"{self.bs}"
            )
        self.instances = [
            Instance(
                i,
                profile.cost,
                self.num_blocks,
                self.bs,
                fc.max_num_seqs,
                fc.max_num_batched_tokens,
                closed_form,
                config.sim.kv_retention_ttl_s,
            )
            for i in range(fc.instances)
        ]
        # KV tiers below HBM (sim/tiers.py), None when off.
        self.tiers = _fleet_tiers(config, profile, self.num_blocks) if fc.kv_tiers.enabled else None
        if self.tiers is not None:
            for inst, it in zip(self.instances, self.tiers.instances, strict=True):
                inst.set_tiers(it)
        runs = not (
            self.probes_pools
            or profile.contended_cost is not None  # a step's cost depends on the others
            or config.policy.cache_view == "exact"  # routing reads the pools
            or config.sim.refresh_on_arrival  # so does an arrival (Instance.submit)
            # a shared disk is read by other instances mid-run (a run evicts at planning)
            or (self.tiers is not None and self.tiers.shared_disk)
        )
        for inst in self.instances:
            inst.prefill_runs = closed_form and runs
            inst.refresh_on_arrival = config.sim.refresh_on_arrival
            inst.seq_name = _seq_name
        self.policy = get_policy(config.policy.name, policy_params(config))
        roles = fc.roles
        if not self.policy.uses_cache_view:  # nothing reads it: keep no prefix index
            self.state = RouterState(fc.instances, roles, None)
        elif config.policy.cache_view == "exact":
            view = (
                ExactCacheView(self.instances)
                if self.tiers is None
                else TieredExactCacheView(self.instances, self.tiers)
            )
            self.state = RouterState(fc.instances, roles, view, record_on_route=False)
        else:
            # The proxy sizes its estimate by the engines' KV blocks (cache_config_info). The
            # proxy's `EstimatedPrefixIndex`, kept by chain segments: the same answers for
            # chained hashes (as `engine_block_hashes` are), no dict entry per block. With KV
            # tiers, the same HBM estimate plus the router's model of the tiers below it
            # (cache/tier_index.py); without, exactly the ChainedPrefixIndex. A policy that
            # never asks for tiers (`uses_tier_view` False) gets the HBM estimate alone: its
            # decisions read only that, and the model of the tiers would be work for nothing.
            self.state = RouterState(
                fc.instances,
                roles,
                estimated_view(
                    fc.instances,
                    self.num_blocks,
                    self.bs,
                    fc.kv_tiers if self.policy.uses_tier_view else KVTiersConfig(),
                    profile.kv_bytes_per_token,
                    fc.hardware,
                    stores_at_free(fc, self.num_blocks),
                ),
            )
        # A policy fitting its cost model online watches the streams (profiles/online.py).
        self.state.observer = getattr(self.policy, "stream_observer", None)
        self.scrape_s = config.sim.scrape_interval_s
        self.sample_s = config.sim.sample_interval_s
        self.kv_fixed_s = config.sim.kv_transfer_fixed_s
        self.kv_bytes_per_s = config.sim.kv_transfer_gbps * 1e9 / 8
        self.mode = config.workload.mode
        self.retain = config.sim.kv_retention_ttl_s > 0
        # Pause-aware placement (policy/pause.py): the router's pause estimate, None when off.
        self.pause: PauseEstimator | None = None
        if config.sim.pause_aware:
            self.pause = PauseEstimator(keep_max_s=config.sim.pause_keep_max_s)
            for inst in self.instances:
                inst.pause_aware = True
                inst.pause_demote = config.sim.pause_demote
        self.pause_demote = config.sim.pause_demote
        self.finish_first = config.sim.finish_first
        self.router_sees_release = config.sim.router_sees_release
        self.max_sessions = config.replay.max_inflight_sessions
        self._heap: list[tuple[float, int, int, Any]] = []
        self._n = 0
        self._uid = 0
        self._now = 0.0
        self._version = [0] * fc.instances
        self._plan_pending = [False] * fc.instances
        # Instances mid-step, kept for a contended profile: a step runs at the contended
        # rate while another instance is mid-step, at the base rate otherwise.
        self._busy: set[Instance] = set()
        self._slots_used = 0
        self._slot_queue: deque[SessionRun] = deque()
        self._outstanding = len(workload)
        # Agentic DAGs: request id -> the other requests it waits for; finished ids; and who
        # waits on an unfinished one. Empty for a flat workload (nothing below runs then).
        self._deps = live_dependencies(workload)
        self._done: set[str] = set()
        self._waiters: dict[str, list[tuple[SessionRun, int]]] = {}
        self.records: list[RequestRecord] = []
        self.samples: list[InstanceSample] = []
        self.stats = SimStats()
        # KV usage per instance as the last SCRAPE event read it (event number, time): a
        # SAMPLE right after it at the same time reads the same values.
        self._scraped: tuple[int, float, list[float]] | None = None

    # ---- event plumbing --------------------------------------------------------------

    def _push(self, t: float, kind: int, payload: Any) -> None:
        self._n += 1
        heapq.heappush(self._heap, (t, kind, self._n, payload))

    def _events(self) -> Iterator[tuple[float, int, Any]]:
        heap = self._heap
        while heap:
            t, kind, _n, payload = heapq.heappop(heap)
            yield t, kind, payload

    def run(self) -> SimStats:
        with no_cycle_collection():
            return self._run()

    def _run(self) -> SimStats:
        for srun in sorted(
            (
                SessionRun(s, takes_slot=s.parent_session_id is None)
                for s in self.workload.sessions
                if s.requests
            ),
            key=lambda r: (r.session.start_s, r.session.session_id),
        ):
            if self.mode == "closed" and self._wait_for_deps(srun, 0):
                continue  # a subagent starts when the turn that spawns it is done
            self._push(srun.session.start_s, RELEASE, srun)
        if self._outstanding:
            if self.scrape_s > 0:
                self._push(0.0, SCRAPE, None)
            self._push(0.0, SAMPLE, None)
        heap = self._heap
        for t, kind, payload in self._events():
            self._now = t
            self.stats.events += 1
            if kind == STEP_END:
                inst, version = payload
                if version == self._version[inst.index]:
                    self._step_end(inst)
            elif kind == PLAN:
                self._plan(payload)
            elif kind == RELEASE:
                if isinstance(payload, SessionRun):
                    self._session_start(payload)
                else:
                    self._release(*payload)
            elif kind == KV_LANDED:
                self._kv_landed(*payload)
            elif kind == SUBMIT:
                self._submit(*payload)
            elif kind == SCRAPE:
                self._scraped = (self.stats.events, t, self._scrape(t))
                if self._outstanding:
                    self._push(t + self.scrape_s, SCRAPE, None)
            elif kind == SAMPLE:
                self._sample(t)
                if self._outstanding:
                    if len(heap) < 2 and all(e[1] == SCRAPE for e in heap):
                        raise self._stalled(t)
                    self._push(t + self.sample_s, SAMPLE, None)
        # Simulated span: up to the last request's end (trailing scrape/sample ticks excluded).
        ends = [r.t_done if r.t_done is not None else r.arrival_s for r in self.records]
        self.stats.sim_s = max(ends, default=0.0)
        self.stats.steps = sum(i.steps for i in self.instances)
        return self.stats

    def _stalled(self, t: float) -> RuntimeError:
        """Requests are outstanding but only the scrape and sample ticks are left to run:
        nothing will ever finish them (a lost wake-up; the run would tick forever)."""
        busy = [
            f"instance {i.index}: {len(i.running)} running, {len(i.waiting)} waiting, "
            f"{len(i.holding)} loaded, {i._in_flight} in flight"
            for i in self.instances
            if i.running or i.waiting or i.holding or i._in_flight or i.step is not None
        ]
        return RuntimeError(
            f"simulation stalled at t={t:.6f} s: {self._outstanding} requests outstanding and no "
            f"event left but scrapes and samples ({'; '.join(busy) or 'no instance has work'})"
        )

    # ---- sessions --------------------------------------------------------------------

    def _session_start(self, srun: SessionRun) -> None:
        if srun.takes_slot:
            if self.max_sessions is not None and self._slots_used >= self.max_sessions:
                self._slot_queue.append(srun)
                return
            self._slots_used += 1
        if self.mode == "closed":
            self._push(self._now, RELEASE, (srun, 0))
        else:
            srun.pending = len(srun.session.requests)
            for k, req in enumerate(srun.session.requests):
                self._push(max(req.arrival_s, self._now), RELEASE, (srun, k))

    def _session_end(self, srun: SessionRun) -> None:
        srun.last_prompt = None
        if not srun.takes_slot:
            return
        self._slots_used -= 1
        if self._slot_queue:
            self._session_start(self._slot_queue.popleft())

    def _request_done(self, srun: SessionRun, turn_index: int) -> None:
        self._outstanding -= 1
        reqs = srun.session.requests
        if self.mode == "closed":
            if turn_index + 1 < len(reqs):
                if not self._wait_for_deps(srun, turn_index + 1):
                    nxt = reqs[turn_index + 1]
                    self._push(self._now + nxt.think_s, RELEASE, (srun, turn_index + 1))
            else:
                self._session_end(srun)
        else:
            srun.pending -= 1
            if srun.pending == 0:
                self._session_end(srun)
        if self._deps:
            self._dependency_done(reqs[turn_index].request_id)

    # ---- agentic DAGs ----------------------------------------------------------------

    def _wait_for_deps(self, srun: SessionRun, k: int) -> bool:
        """Park request k of `srun` until the requests it depends on are done (True if any
        is still running or unreleased)."""
        deps = self._deps.get(srun.session.requests[k].request_id)
        if not deps:
            return False
        unmet = [d for d in deps if d not in self._done]
        for d in unmet:
            self._waiters.setdefault(d, []).append((srun, k))
        return bool(unmet)

    def _dependency_done(self, request_id: str) -> None:
        self._done.add(request_id)
        for srun, k in self._waiters.pop(request_id, ()):
            req = srun.session.requests[k]
            if any(d not in self._done for d in self._deps[req.request_id]):
                continue  # still waiting for another one (it holds a waiter entry too)
            if self.mode == "open":
                self._push(self._now, RELEASE, (srun, k))
            elif k == 0:  # a subagent's first turn: its session starts now (after its wait)
                self._push(self._now + req.think_s, RELEASE, srun)
            else:
                self._push(self._now + req.think_s, RELEASE, (srun, k))

    # ---- requests --------------------------------------------------------------------

    def _release(self, srun: SessionRun, k: int) -> None:
        req = srun.session.requests[k]
        if self.mode == "open" and self._deps and self._wait_for_deps(srun, k):
            return  # open loop: sent at its arrival or when its dependencies are done
        now = self._now
        cfg = self.config
        rec = RequestRecord(
            request_id=req.request_id,
            session_id=req.session_id,
            turn=req.turn,
            arrival_s=now,
            input_tokens=req.input_tokens,
            cache_view=cfg.policy.cache_view,
            policy=cfg.policy.name,
            t_proxy_recv=now,
        )
        self.records.append(rec)
        output = max(req.output_tokens, 1)
        if req.input_tokens + output > self.num_blocks * self.bs or req.input_tokens < 1:
            # A real engine rejects it (longer than max_model_len, which fits in its KV).
            rec.error = (
                f"request {req.request_id}: {req.input_tokens} prompt + {output} output tokens "
                f"do not fit the instance KV cache of {self.num_blocks * self.bs} tokens"
            )
            self._request_done(srun, k)
            return
        hashes = self._prompt_hashes(srun, req)
        sid = req.session_id
        view = RequestView(
            req.request_id,
            sid,
            self.state.session_turns.get(sid, 0),
            req.input_tokens,
            output,
            hashes,
            self.bs,
            k + 1 >= len(srun.session.requests),  # the session's finish signal
        )
        if self.scrape_s == 0:
            self._scrape(now)
        try:
            fleet_view = self.state.view(now)
            decision = self.policy.decide(view, fleet_view)
        except NoHealthyInstance as exc:
            rec.error = f"no healthy instance: {exc}"
            self._request_done(srun, k)
            return
        decision.policy = decision.policy or cfg.policy.name
        if fleet_view.knows_tiers:  # what the view expects from each tier, as the proxy records
            hits = fleet_view.tier_hits(view)[decision.prefill]  # (asked before `admit` records)
            rec.predicted_host_tokens, rec.predicted_disk_tokens = hits.host, hits.disk
        ticket = self.state.admit(view, decision, now)
        for key, value in decision.receipt().items():  # the route receipt, as the proxy's
            setattr(rec, key, value)
        rec.t_prefill_sent = now
        if decision.disaggregated:  # D's own prefix hit, as the router's view predicts it
            rec.predicted_decode_cached_tokens = fleet_view.cached_tokens(view)[decision.decode]
        hint = None
        if self.pause is not None and sid is not None:  # the pause that ended; the next one
            self.pause.arrived(sid, now)
            if k + 1 < len(srun.session.requests):
                hint = self.pause.hint(sid)
        flight = Flight(req, rec, ticket, srun)
        flight_k = (flight, k)
        self._uid += 1
        if decision.disaggregated:
            seq = Seq(self._uid, req.input_tokens, 1, hashes, flight_k, hold_blocks=True)
            flight.prefill_seq = seq
            self._ingress(self.instances[decision.prefill], seq)
        else:
            seq = Seq(self._uid, req.input_tokens, output, hashes, flight_k)
            if self.retain:
                seq.retain_key = sid
                # Only a turn that ends in a tool call (the session goes on) is worth holding;
                # an engine sees that as finish_reason "tool_calls".
                seq.retain_after = k + 1 < len(srun.session.requests)
            if self.pause is not None:
                seq.retain_key = sid  # (its admission ends the session's hold)
            if hint is not None:  # carried with the request, as a connector's params would be
                seq.retain_after = not hint.demote
                seq.retain_ttl_s = hint.keep_s
                seq.demote = hint.demote and self.pause_demote
                if self.router_sees_release and self.pause_demote:  # told at the finish
                    if hint.demote:
                        ticket.release_first = ticket.store_below = True
                    elif hint.keep_s > 0:
                        ticket.demote_after_s = hint.keep_s  # held, then demoted if still paused
            if self.finish_first:  # the finish signal (RequestView.last_turn), carried likewise
                seq.release_first = k + 1 == len(srun.session.requests)
                if seq.release_first and self.router_sees_release:
                    ticket.release_first = True
            flight.decode_seq = seq
            self._ingress(self.instances[decision.decode], seq)

    def _ingress(self, inst: Instance, seq: Seq) -> None:
        """A routed request reaches its engine: now, or after the frontends' delay."""
        if self.ingress_s:
            wait = self._ingress_rng.expovariate(1.0 / self.ingress_s)
            self._push(self._now + wait, SUBMIT, (inst, seq))
        else:
            self._submit(inst, seq)

    def _prompt_hashes(self, srun: SessionRun, req: Request) -> list[int]:
        """`engine_block_hashes(req)`, extending the session's previous prompt's: the leading
        content blocks the two share (same ids and sizes) keep their chain states, and the
        engine blocks inside them their hashes."""
        bs = self.bs
        blocks = req.blocks
        last = srun.last_prompt
        k = 0
        known = None
        if last is not None:
            prev_blocks, prev, bases, states = last
            n = tokens = 0
            for a, b in zip(prev_blocks, blocks, strict=False):  # up to the shorter
                if a.id != b.id or a.tokens != b.tokens:
                    break
                n += 1
                tokens += a.tokens
            k = min(tokens // bs, len(prev))
            known = (bases[:n], states[:n])
        bases, states = chain_states(blocks, known)
        hashes = engine_block_hashes(req, bs, k, bases)
        if k:
            # One copy of the shared head (`prev[:k] + hashes` copies it twice): each copy
            # touches every hash int's reference count, scattered in memory.
            head = prev[:k]
            head += hashes
            hashes = head
        srun.last_prompt = (blocks, hashes, bases, states)
        return hashes

    def _submit(self, inst: Instance, seq: Seq) -> None:
        inst.submit(seq)
        self._wake(inst)

    def _wake(self, inst: Instance) -> None:
        """Something new for `inst`: plan a step now if idle, else end its run early."""
        if inst.step is None:
            if not self._plan_pending[inst.index]:
                self._plan_pending[inst.index] = True
                self._push(self._now, PLAN, inst)
        elif inst.needs_cut() and inst.cut(self._now):
            self._version[inst.index] += 1
            self._push(inst.step.t_end, STEP_END, (inst, self._version[inst.index]))

    def _plan(self, inst: Instance) -> None:
        self._plan_pending[inst.index] = False
        if inst.step is not None:
            return
        slow = self.profile.contended_cost
        if slow is not None:
            inst.cost = slow if self._busy else self.profile.cost
        step = inst.schedule(self._now)
        if step is None:
            return
        inst.step = step
        if slow is not None and step.t_end > self._now:
            if len(self._busy) == 1:  # the one busy instance now shares the cores
                self._stretch(next(iter(self._busy)), slow, self.profile.cost)
            self._busy.add(inst)
        for seq in step.transfers:
            self._start_transfer(inst, seq)
        self._version[inst.index] += 1
        self._push(step.t_end, STEP_END, (inst, self._version[inst.index]))

    def _stretch(self, inst: Instance, cost_now: StepCost, cost_before: StepCost) -> None:
        """Another instance started or ended a step: `inst`'s step in progress goes on at
        the other rate from now (processor sharing: the slowdown lasts as long as the overlap,
        not a whole step or run)."""
        if inst.stretch(self._now, cost_now, cost_before):
            assert inst.step is not None
            self._version[inst.index] += 1
            self._push(inst.step.t_end, STEP_END, (inst, self._version[inst.index]))

    def _step_end(self, inst: Instance) -> None:
        busy = self._busy
        if busy and inst in busy:
            busy.remove(inst)
            if len(busy) == 1:  # the other one has the cores to itself again
                assert self.profile.contended_cost is not None
                self._stretch(next(iter(busy)), self.profile.cost, self.profile.contended_cost)
        for seq in inst.finish_step():
            flight, k = seq.tag
            if seq is flight.prefill_seq:
                self._prefill_done(flight)
                continue
            rec = flight.record
            if seq.t_first_token == self._now and rec.t_first_token is None:
                rec.t_first_token = self._now
                self.state.first_token(flight.ticket, self._now)
                if flight.prefill_seq is None:
                    rec.cached_tokens = max(seq.cached_tokens, 0)
                    rec.t_prefill_done = self._now
                    if self.tiers is not None:
                        _tier_record(rec, seq)
                else:  # as the proxy records PD: D's wait, pull and first step
                    rec.decode_cached_tokens = max(seq.cached_tokens, 0)
                    rec.kv_transfer_s = self._now - (rec.t_prefill_done or self._now)
            if seq.t_done is not None:
                rec.t_done = seq.t_done
                rec.output_tokens = seq.generated
                self.state.finish(flight.ticket, seq.generated, self._now)
                sid = flight.request.session_id
                if self.pause is not None and sid is not None:
                    if k + 1 < len(flight.session.session.requests):
                        self.pause.finished(sid, self._now)
                    else:
                        self.pause.forget(sid)
                rec.finalize()
                self._request_done(flight.session, k)
                # A flight and its sequences refer to each other (seq.tag): unlinked, they go
                # by reference count, not left (with their hash lists) to the cyclic collector.
                flight.prefill_seq = flight.decode_seq = None
        self._plan_pending[inst.index] = True
        self._push(self._now, PLAN, inst)

    # ---- PD: prefill done, KV transfer, decode ---------------------------------------

    def _prefill_done(self, flight: Flight) -> None:
        p = flight.prefill_seq
        assert p is not None
        rec = flight.record
        rec.t_prefill_done = self._now
        rec.cached_tokens = rec.prefill_cached_tokens = max(p.cached_tokens, 0)
        if self.tiers is not None:
            _tier_record(rec, p)  # the prefill side's tiers (D receives the whole prompt)
        self.state.prefill_done(flight.ticket, self._now)
        d = flight.ticket.decision
        self._uid += 1
        seq = Seq(
            self._uid,
            p.prompt_tokens,
            max(flight.request.output_tokens, 1),
            p.hashes,
            p.tag,
            kv=KV_NEEDS_BLOCKS,
            retain_key=flight.request.session_id if self.retain else None,
            retain_after=self._retains(flight),
            release_first=self.finish_first and self._last_turn(flight),
        )
        flight.ticket.release_first = seq.release_first and self.router_sees_release
        flight.decode_seq = seq
        self._submit(self.instances[d.decode], seq)

    def _retains(self, flight: Flight) -> bool:
        return self.retain and not self._last_turn(flight)

    def _last_turn(self, flight: Flight) -> bool:
        _flight, k = flight.prefill_seq.tag if flight.prefill_seq is not None else (None, 0)
        return k + 1 == len(flight.session.session.requests)

    def _start_transfer(self, inst: Instance, seq: Seq) -> None:
        if seq.reload is not None:  # a load from host memory / disk
            host, disk, ready_host, ready_disk = seq.reload
            assert inst.tiers is not None
            end = inst.tiers.reload(host, disk, (ready_host, ready_disk), self._now)
            wait = end - self._now
            seq.reload_wait_s += wait
            self.stats.reloads += 1
            self.stats.reload_s += wait
            self._push(end, KV_LANDED, (inst, seq))
            return
        flight, _k = seq.tag
        tokens = seq.remote_tokens
        dt = self.kv_fixed_s + tokens * self.profile.kv_bytes_per_token / self.kv_bytes_per_s
        # The record's kv_transfer_s is set at D's first token, as the proxy measures it.
        flight.record.kv_transfer_tokens = tokens
        self.stats.transfers += 1
        self.stats.transfer_s += dt
        self._push(self._now + dt, KV_LANDED, (inst, seq))

    def _kv_landed(self, inst: Instance, seq: Seq) -> None:
        if seq.reload is not None:  # a tier load: the request is scheduled again
            inst.kv_landed(seq)
            self._wake(inst)
            return
        flight, _k = seq.tag
        inst.kv_landed(seq)
        p = flight.prefill_seq
        assert p is not None
        pinst = self.instances[flight.ticket.decision.prefill]
        pinst.release(p)  # the prefill side frees its blocks once they are read
        self._wake(pinst)
        self._wake(inst)

    # ---- observation -----------------------------------------------------------------

    def _scrape(self, t: float) -> list[float]:
        insts = self.instances
        usage = kv_usages(insts, t)
        self.state.update_scrapes(
            t,
            [len(i.running) for i in insts],
            [len(i.waiting) + len(i.holding) for i in insts],  # holding: tier loads
            usage,
        )
        return usage

    def _sample(self, t: float) -> None:
        got = self._scraped
        if got is not None and got[0] == self.stats.events - 1 and got[1] == t:
            usage = got[2]  # nothing ran between that scrape and this sample
        else:
            usage = kv_usages(self.instances, t)
        # Fields by position (t, instance, running, waiting, kv_usage, prefix_cache_queries,
        # prefix_cache_hits, external_prefix_cache_hits, preemptions, router_inflight,
        # router_pending_prefill_tokens): a third of the cost of keywords, per instance and
        # sample interval.
        self.samples.extend(
            [
                InstanceSample(
                    t,
                    inst.index,
                    len(inst.running),
                    len(inst.waiting) + len(inst.holding),
                    kv,
                    float(inst.prefix_queries),
                    float(inst.prefix_hits),
                    float(inst.external_hits),
                    float(inst.preemptions),
                    view.num_requests,
                    view.pending_prefill_tokens,
                )
                for inst, view, kv in zip(self.instances, self.state.instances, usage, strict=True)
            ]
        )
        if self.tiers is not None:  # each tier's usage (fields left out of tier-off samples)
            for sample, inst in zip(
                self.samples[-len(self.instances) :], self.instances, strict=True
            ):
                it = inst.tiers
                assert it is not None
                if it.host is not None:
                    sample.host_kv_usage = it.host.usage
                if it.disk is not None:
                    sample.disk_kv_usage = it.disk.usage


def _fleet_tiers(config: RunConfig, profile: EngineProfile, hbm_blocks: int) -> FleetTiers:
    """The fleet's KV tiers: `fleet.kv_tiers`, links not given there from the hardware;
    `hbm_blocks`: an instance's HBM pool, which vLLM's lazy walk may cover."""
    fc = config.fleet
    cfg = fc.kv_tiers
    try:
        links = tier_links(fc.hardware)
    except ValueError as exc:
        given = [
            cfg.host_h2d_gbps,
            cfg.host_d2h_gbps,
            cfg.host_latency_s,
            cfg.disk_read_gbps,
            cfg.disk_write_gbps,
            cfg.disk_latency_s,
        ]
        if any(v is None for v in given):
            raise ConfigError(f"field 'fleet.kv_tiers': {exc}") from None
        links = TierLinks(*given, None, "fleet.kv_tiers")  # type: ignore[arg-type]
    return FleetTiers(
        cfg,
        links,
        profile,
        fc.block_size,
        fc.instances,
        config.sim.kv_retention_ttl_s,
        lazy_walk_covers_pool=stores_at_free(fc, hbm_blocks),
        store_after_allocations=fc.kv_tiers.lazy_store == "walk",
    )


def stores_at_free(fc: FleetConfig, hbm_blocks: int) -> bool:
    """Whether a lazy tier (no write-through) also stores each turn's blocks when freed: vLLM's
    walk covers the HBM pool of `hbm_blocks` (`lazy_store: walk`), or the simulator's bound
    `free` says so. The engine's tiers and the router's estimate of them both read it."""
    store = fc.kv_tiers.lazy_store
    return store == "free" or (
        store == "walk"
        and walk_stores_at_free(fc.max_num_batched_tokens, fc.block_size, hbm_blocks)
    )


def _seq_name(seq: Seq) -> str:
    """A sequence as an error names it: its request id (`seq.tag` is its flight and turn)."""
    flight, _k = seq.tag
    return f"request {flight.request.request_id} (seq {seq.uid})"


def _tier_record(rec: RequestRecord, seq: Seq) -> None:
    """A record's tier fields from its sequence's first admission."""
    rec.host_tokens = seq.host_tokens
    rec.disk_tokens = seq.disk_tokens
    rec.recomputed_tokens = (
        rec.input_tokens - max(seq.cached_tokens, 0) - seq.host_tokens - seq.disk_tokens
    )
    rec.reload_wait_s = seq.reload_wait_s
