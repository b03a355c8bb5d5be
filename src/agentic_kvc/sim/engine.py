"""One simulated vLLM instance: the v1 scheduler's decisions, step by step or in closed form.

Scheduling follows vLLM v1 (`vllm/v1/core/sched/scheduler.py`, FCFS, chunked prefill on):
- a token budget per step (`max_num_batched_tokens`); running requests are scheduled first, in
  admission order, each with all its uncomputed tokens clipped to the budget left;
- a running request that cannot get blocks preempts the most recently admitted running request
  (recompute: its blocks are freed, it goes back to the head of the waiting queue) until it fits;
- only when nothing was preempted are waiting requests admitted, in order, while fewer than
  `max_num_seqs` run and budget is left; a new request first looks up its prefix in the cache
  (full blocks, at most `num_tokens - 1` tokens); the first one that cannot get blocks stops
  admission;
- a request whose prompt KV comes from another instance (PD decode side) gets blocks for its
  whole prompt when admitted, then waits, skipped by the scheduler, until the transfer lands;
  it then recomputes its last prompt token to sample the first output token, as vLLM does;
- a request that finishes frees its blocks, except on a PD prefill instance, which holds them
  until the decode instance has read them.

Speed: a step whose batch is decode-only, with nothing admitted or preempted, repeats unchanged
until a request finishes, blocks run out, or something arrives. Such a run of k steps is one
`Step` whose duration is an arithmetic series in closed form (`StepCost.decode_affine`: each
step reads one more KV token per sequence); an arrival cuts it at the step in progress.

Likewise a long prompt's prefill: while its chunks take the whole token budget, each step is
the same (the decoding requests before it, then a full chunk of it), nothing is admitted
(no budget is left) and nothing preempted while blocks last, so the steps up to its last chunk
(or a decoder's end) are one `Step` too, planned at once (`_prefill_run`): its blocks are
allocated and hashed step by step at planning, in the order the steps would, and each step's
end time is the sum the step-by-step loop would compute. Observers see the same: a scrape
counts only the blocks of steps already started (`kv_usage_at`), and no one else reads the
pool meanwhile (the fleet turns these runs off for the exact cache view, contended CPU
profiles and instruments that probe pools; the instance for retained KV and PD transfers).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_kvc.policy.base import TierHits
from agentic_kvc.profiles.cost import StepCost
from agentic_kvc.sim.blocks import BlockPool, BlockTable, Hit
from agentic_kvc.sim.tiers import InstanceTiers

_SYNTHETIC = 1 << 64  # hashes of blocks holding generated tokens live above every engine hash

# Remote KV states (PD decode side).
KV_LOCAL, KV_NEEDS_BLOCKS, KV_IN_FLIGHT = 0, 1, 2


@dataclass(slots=True, eq=False)
class Seq:
    """A request as one engine sees it."""

    uid: int
    prompt_tokens: int
    max_output: int
    hashes: list[int]  # engine hashes of the prompt's full blocks
    tag: Any = None  # the fleet's handle
    hold_blocks: bool = False  # PD prefill side: keep KV until the decode side has read it
    kv: int = KV_LOCAL
    num_tokens: int = 0
    num_computed: int = 0
    generated: int = 0
    blocks: BlockTable = field(default_factory=BlockTable)  # its hashed blocks lead
    retain_key: str | None = None  # KV retention: the session this request's KV belongs to
    retain_after: bool = False  # hold its KV when it finishes (the session goes on)
    # Pause-aware placement (policy/pause.py): the router's hint for when it finishes: hold
    # its KV this long (None: the instance's TTL), or demote it below HBM at once.
    retain_ttl_s: float | None = None
    demote: bool = False
    # Finished sessions first (sim.finish_first): the session's last turn; its blocks go to
    # the head of the free queue when it finishes.
    release_first: bool = False
    cached_tokens: int = -1  # local prefix hit at first admission (-1: not admitted yet)
    remote_tokens: int = 0  # prompt tokens received by KV transfer
    # KV tiers (sim/tiers.py): prompt tokens loaded from host / disk at first admission, the
    # load in flight (host blocks, disk blocks, when their writes land: host, disk; None: a PD
    # transfer or none), and the time spent waiting for loads, summed over admissions.
    host_tokens: int = 0
    disk_tokens: int = 0
    reload: tuple[int, int, float, float] | None = None
    reload_wait_s: float = 0.0
    t_first_token: float | None = None
    t_done: float | None = None

    def __post_init__(self) -> None:
        self.num_tokens = self.prompt_tokens

    def block_hashes(self, start: int, stop: int) -> list[int]:
        """Hashes of blocks start..stop-1: the prompt's, then synthetic ones for generated
        tokens (unique to this request, consecutive so a range builds them at C speed)."""
        n_prompt = len(self.hashes)
        if stop <= n_prompt:
            return self.hashes[start:stop]
        base = _SYNTHETIC + (self.uid << 32)
        return self.hashes[start:n_prompt] + list(range(base + max(start, n_prompt), base + stop))


@dataclass(slots=True)
class Step:
    """One engine step, or a closed-form run of `k` identical decode-only steps."""

    t0: float
    seqs: list[Seq]
    num_new: list[int]
    t_end: float
    k: int = 1
    a: float = 0.0  # run of steps: step j (1-based) lasts a + b * (kv0 + batch * (j - 1))
    b: float = 0.0
    kv0: int = 0
    transfers: list[Seq] = field(default_factory=list)  # remote KV to start loading now
    # A prefill run (`Instance._prefill_run`): step j (1-based) ends at ends[j - 1]; steps
    # 2..j allocated extra[j - 1] blocks (extra[0] = 0). None for a decode run or one step.
    ends: list[float] | None = None
    extra: list[int] | None = None

    def end_of(self, j: int) -> float:
        n = len(self.seqs)
        return self.t0 + j * self.a + self.b * (j * self.kv0 + n * j * (j - 1) / 2)

    def ended_by(self, t: float) -> int:
        """The last j in [0, k-1] with end_of(j) <= t (0 if none): steps done by `t`.

        end_of is increasing in j, so this is what a binary search over j finds; the root of
        the quadratic lands next to it and a step or two of end_of settles it exactly.
        """
        top = self.k - 1
        qa = self.b * len(self.seqs) / 2  # end_of(j) - t0 = qa j^2 + qb j
        qb = self.a + self.b * self.kv0 - qa
        dt = t - self.t0
        if qa > 0:
            j = int((-qb + math.sqrt(max(qb * qb + 4 * qa * dt, 0.0))) / (2 * qa))
        elif qb > 0:
            j = int(dt / qb)
        else:
            j = top
        j = min(max(j, 0), top)
        while j < top and self.end_of(j + 1) <= t:
            j += 1
        while j > 0 and self.end_of(j) > t:
            j -= 1
        return j


class EngineStalled(RuntimeError):
    """A simulated instance has waiting work that nothing can ever schedule (a liveness bug:
    the run would otherwise go on sampling an idle instance forever)."""

    def __init__(self, inst: Instance, now: float) -> None:
        pool = inst.pool
        lines = [
            f"instance {inst.index} is stalled at t={now:.6f} s: {len(inst.waiting)} waiting, "
            f"{len(inst.holding)} loaded (holding blocks), nothing running, no KV load or "
            f"transfer in flight; {pool.num_free} of {pool.num_blocks} blocks free"
        ]
        for where, seqs in (("loaded", inst.holding), ("waiting", inst.waiting)):
            for s in seqs:
                lines.append(
                    f"  {where} {inst.seq_name(s)}: {s.num_computed} of {s.num_tokens} tokens "
                    f"computed, {len(s.blocks)} blocks, {s.generated} of {s.max_output} output"
                )
        super().__init__("\n".join(lines))
        self.index = inst.index
        self.seqs = [*inst.holding, *inst.waiting]


def _seq_name(seq: Seq) -> str:
    return f"seq {seq.uid}"


class Instance:
    def __init__(
        self,
        index: int,
        cost: StepCost,
        num_blocks: int,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        closed_form: bool = True,
        retention_ttl_s: float = 0.0,
    ) -> None:
        self.index = index
        self.cost = cost
        self.pool = BlockPool(num_blocks, block_size)
        self.bs = block_size
        self.max_num_seqs = max_num_seqs
        self.max_batched = max_num_batched_tokens
        self.closed_form = closed_form
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.step: Step | None = None
        # Counters as vLLM's /metrics has them.
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.external_hits = 0
        self.preemptions = 0
        self.steps = 0
        # KV retention across tool pauses (off at 0): a finished request's blocks stay held
        # for `retention_ttl_s`, keyed by its session, in expiry order. A hold ends when the
        # session's next turn is admitted here (it then holds what it hit), when the TTL
        # runs out, or, oldest first, when blocks run short: held blocks are evicted only
        # after every unheld free block, so retention prioritises, never starves, a request.
        self.retention_ttl_s = retention_ttl_s
        self.holds: dict[str, tuple[BlockTable, float]] = {}
        self.retained_releases = {"reused": 0, "expired": 0, "reclaimed": 0}
        # Pause-aware placement: holds have per-request TTLs (so `holds` is no longer in
        # expiry order) and a hold that expires is demoted, as is a turn the router says will
        # pause long (`_demote`). `demoted`: turns demoted at their end, holds at expiry.
        self.pause_aware = False
        self.pause_demote = True  # (off: the keep half alone; expired holds are released)
        self.demoted = {"turn_end": 0, "expired": 0}
        self.finished_first = 0  # last turns released to the free queue's head
        # sim.refresh_on_arrival: a request's cached prefix becomes the most recent free KV
        # when it arrives, not when it is admitted (`submit`); `refreshed` counts the blocks.
        self.refresh_on_arrival = False
        self.refreshed = 0
        # Prefill runs (see the module doc): on only when the owner says no one reads the
        # pool between steps; and not while a PD transfer may touch it mid-run (`_in_flight`:
        # remote KV loading here; `_held`: finished prefills whose blocks wait to be read).
        self.prefill_runs = False
        self._in_flight = 0
        self._held = 0
        # KV tiers below HBM (None: HBM only). With tiers, the pool logs what it evicts;
        # `holding`: requests admitted for a tier load, in admission order, until scheduled.
        self.tiers: InstanceTiers | None = None
        self.holding: deque[Seq] = deque()
        # Turns that ended since the last schedule, whose blocks a lazy walk stores after
        # that schedule's allocations (`InstanceTiers.store_after_allocations`).
        self._freed_unstored: list[list[int]] = []
        # How errors name a request (the fleet names it by its request id).
        self.seq_name: Callable[[Seq], str] = _seq_name

    def set_tiers(self, tiers: InstanceTiers) -> None:
        self.tiers = tiers
        if tiers.top is not None and not tiers.write_through:
            self.pool.evict_log = []

    def _offload(self, now: float) -> None:
        """Move what HBM evicted since the last call down a tier (lazy offload)."""
        log = self.pool.evict_log
        if log:
            assert self.tiers is not None
            self.pool.evict_log = []
            self.tiers.offload(log, now)

    def tier_hits(self, block_hashes: Sequence[int]) -> TierHits:
        """Leading tokens of a prompt (its block hashes) held here: in HBM, then host memory,
        then disk, contiguous; read from the pool and the tier stores themselves. The router's
        exact view answers the same from KV events (`fleet.TieredExactCacheView`); this is the
        reference tests/sim/test_sim_tier_events.py checks it against."""
        n = self.pool.count_hit(block_hashes)
        host = disk = 0
        if self.tiers is not None:
            host, disk = self.tiers.runs(block_hashes, n, len(block_hashes))
        bs = self.bs
        return TierHits(n * bs, host * bs, disk * bs)

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.bs

    # ---- scheduling ------------------------------------------------------------------

    def _cache_full(self, seq: Seq, upto_tokens: int) -> None:
        blocks = seq.blocks
        full = upto_tokens // self.bs
        if full > blocks.n_hashed:  # (most calls stop here: no block filled)
            full = min(full, blocks.n_hashed + blocks.n_unhashed)
            if full > blocks.n_hashed:
                self.pool.cache(blocks, full, seq.block_hashes, len(seq.hashes))

    # ---- KV retention ----------------------------------------------------------------

    def _hold(self, key: str, seq: Seq, until: float) -> None:
        old = self.holds.pop(key, None)
        if old is not None:
            self.pool.release(old[0])
        self.holds[key] = (seq.blocks, until)
        seq.blocks = BlockTable()

    def _unhold(self, key: str, why: str, now: float = 0.0) -> None:
        table, _until = self.holds.pop(key)
        self.retained_releases[why] += 1
        if why == "expired" and self.pause_aware and self.pause_demote:
            # The pause outlived its prediction: likely a long one (heavy tail).
            self.demoted["expired"] += 1
            self._demote(table, now)
            return
        self.pool.release(table)

    def _demote(self, table: BlockTable, now: float) -> None:
        """Pause-aware placement: a paused session's KV leaves HBM's way. Its prompt blocks
        are written to the top tier below HBM now (if there is one and it is not written
        through already), and its blocks join the head of the free queue, the first to be
        reused: until then they still hit, after that the tier holds them."""
        tiers = self.tiers
        if tiers is not None and tiers.top is not None and not tiers.write_through:
            hashes: list[int] = []
            leaves = [leaf for p in table.pieces for leaf in p.leaves()]
            for leaf in leaves:
                hs = leaf.hashes
                if hs is None or leaf.lo != len(hashes) or hs[0] >= _SYNTHETIC:
                    break  # (the prompt's blocks lead, contiguous; generated ones after)
                hashes += hs
            if hashes:
                tiers.top.put([(0, hashes)], now)
                for leaf in leaves:
                    leaf.below = True  # stored below: an eviction checks them in full
        self.pool.release_first(table)

    def _expire(self, now: float) -> None:
        holds = self.holds
        if self.pause_aware:  # per-request TTLs: any hold may be the next to expire
            for key in [k for k, (_t, until) in holds.items() if until <= now]:
                self._unhold(key, "expired", now)
            return
        while holds:
            key, (_table, until) = next(iter(holds.items()))
            if until > now:
                break
            self._unhold(key, "expired")

    def _reclaim(self, need: int) -> None:
        """Release holds, oldest first, until `need` blocks are free (or none is left)."""
        while self.holds and self.pool.num_free < need:
            self._unhold(next(iter(self.holds)), "reclaimed")

    def _grow(self, seq: Seq, n: int) -> bool:
        """vLLM's allocate_slots for a running request: blocks for n more tokens, or False."""
        blocks = seq.blocks
        need = -(-(seq.num_computed + n) // self.bs) - blocks.n_hashed - blocks.n_unhashed
        if need > 0:
            if need > self.pool.num_free and self.holds:
                self._reclaim(need)
            if need > self.pool.num_free:
                return False
            self.pool.allocate(seq.blocks, need)
        self._cache_full(seq, seq.num_computed + n)
        return True

    def _preempt(self, seq: Seq) -> None:
        self.pool.release(seq.blocks)
        seq.num_computed = 0
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _pool_hit(self, seq: Seq) -> Hit:
        """The pool's cached prefix of `seq`, at most num_tokens - 1 tokens (vLLM's cap)."""
        max_blocks = (seq.num_tokens - 1) // self.bs
        # A preempted request also looks up its generated blocks. (The prompt's own list
        # otherwise: the lookup only reads it.)
        hashes = seq.hashes if max_blocks <= len(seq.hashes) else seq.block_hashes(0, max_blocks)
        return self.pool.lookup(hashes, max_blocks)

    def _lookup(self, seq: Seq) -> Hit:
        """The cached prefix at admission, counted in the prefix-cache statistics."""
        out = self._pool_hit(seq)
        self.prefix_queries += seq.num_tokens
        self.prefix_hits += out.n * self.bs
        return out

    def _admit(self, seq: Seq, budget: int, transfers: list[Seq]) -> int | None:
        """Try to admit the head of the waiting queue; tokens scheduled, or None if blocked."""
        pool, bs = self.pool, self.bs
        hit: Hit | None = None
        if seq.num_computed == 0:
            hit = self._lookup(seq)
        n_hit = hit.n if hit is not None else 0
        computed = seq.num_computed + n_hit * bs
        ext = 0
        if seq.kv == KV_NEEDS_BLOCKS:
            n = seq.num_tokens - computed  # all remaining prompt tokens arrive by transfer
        else:
            if hit is not None and self.tiers is not None:
                # vLLM asks the connector for what follows the HBM hit (same cap).
                host, disk = self.tiers.runs(hit.hashes, n_hit, (seq.num_tokens - 1) // bs)
                ext = host + disk
            n = 0 if ext else min(seq.num_tokens - computed, budget)
        need = -(-(computed + n) // bs) + ext - n_hit - len(seq.blocks)
        if ext and self.holding:
            # vLLM admits a load only if it leaves the blocks that loads already admitted
            # still need for the rest of their prompts (`reserved_blocks`).
            reserved = sum(max(-(-s.num_tokens // bs) - len(s.blocks), 0) for s in self.holding)
            if need + reserved + (pool.evictable(hit) if n_hit else 0) > pool.num_free:
                return None
        if need + (pool.evictable(hit) if n_hit else 0) > pool.num_free:
            if not self.holds:
                return None
            # Blocks run short: drop other sessions' holds first (this session's own hold
            # is what it hits), then its own.
            own = self.holds.pop(seq.retain_key, None) if seq.retain_key else None
            self._reclaim(need + (pool.evictable(hit) if n_hit else 0))
            if own is not None:
                self.holds[seq.retain_key] = own  # type: ignore[index]
            if need + (pool.evictable(hit) if n_hit else 0) > pool.num_free:
                self._reclaim(need + (pool.evictable(hit) if n_hit else 0))
                if need + (pool.evictable(hit) if n_hit else 0) > pool.num_free:
                    return None
        if hit is not None and n_hit:
            pool.take(seq.blocks, hit)
        if seq.retain_key is not None and seq.retain_key in self.holds:
            self._unhold(seq.retain_key, "reused")  # the next turn holds what it hit now
        if need > 0:
            pool.allocate(seq.blocks, need)
        seq.num_computed = computed
        first = seq.cached_tokens < 0
        if first:
            seq.cached_tokens = n_hit * bs
        if ext:
            # An asynchronous load (WAITING_FOR_REMOTE_KVS): the blocks are taken, the request
            # waits, skipped, until they land (`kv_landed`), then is scheduled again.
            assert hit is not None and self.tiers is not None
            ready = self.tiers.claim(hit.hashes, n_hit, host, disk)
            seq.num_computed = computed + ext * bs
            seq.reload = (host, disk, *ready)
            if first:
                seq.host_tokens, seq.disk_tokens = host * bs, disk * bs
            seq.kv = KV_IN_FLIGHT
            self._in_flight += 1
            transfers.append(seq)
            return 0
        if seq.kv == KV_NEEDS_BLOCKS:
            seq.remote_tokens = n
            seq.kv = KV_IN_FLIGHT
            self._in_flight += 1
            transfers.append(seq)
            return 0
        self._cache_full(seq, computed + n)
        return n

    def schedule(self, now: float) -> Step | None:
        """Plan the next step at `now`; None if there is nothing to do.

        A pass that preempted admits nothing (vLLM skips the waiting queue then); if it also
        scheduled nothing (the first running request could not grow and preempted every
        running one, itself last) vLLM's engine core runs an empty step and schedules again
        at once, admitting from the freed blocks. The simulator plans that second pass at the
        same `now`: returning None would leave the instance idle with waiting work and
        nothing to wake it (with tiers, a loaded request's blocks then stayed held forever).

        Raises `EngineStalled` when nothing can run and nothing will change that: waiting
        work, nothing running, no KV load or transfer in flight, no blocks held for a PD
        decode side (`_stalled`).
        """
        preemptions = self.preemptions
        step = self._schedule(now)
        if self._freed_unstored:
            self._store_freed(now)
        if step is None and self.preemptions != preemptions:
            if self.pool.evict_log:
                self._offload(now)
            step = self._schedule(now)
        if self.pool.evict_log:
            self._offload(now)
        if step is None and self._stalled():
            raise EngineStalled(self, now)
        return step

    def _stalled(self) -> bool:
        """Waiting work that no event can unblock: nothing runs (no blocks will be freed by a
        finish or a preemption), no load or PD transfer will land, no PD prefill's blocks
        will be released. Holds do not count: admission reclaims them."""
        return (
            bool(self.waiting or self.holding)
            and not self.running
            and not self._in_flight
            and not self._held
        )

    def _schedule(self, now: float) -> Step | None:
        if self.holds:
            self._expire(now)
        budget = self.max_batched
        seqs: list[Seq] = []
        nums: list[int] = []
        running = self.running
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            n = min(seq.num_tokens - seq.num_computed, budget)
            fits = True
            while not self._grow(seq, n):
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    fits = False
                    break
            if not fits:
                break
            seqs.append(seq)
            nums.append(n)
            budget -= n
            i += 1
        n_running_scheduled = len(seqs)
        transfers: list[Seq] = []
        admitted = False
        if not preempted:
            skipped: list[Seq] = []
            waiting = self.waiting
            blocked = False
            if self.holding:
                # vLLM drains the requests that hold KV blocks (tier loads) before the
                # waiting queue: else a loaded request behind a head that cannot get blocks
                # would hold its blocks with nothing running to free any.
                holding = self.holding
                kept: list[Seq] = []
                while holding and budget > 0 and len(running) < self.max_num_seqs:
                    seq = holding[0]
                    if seq.kv == KV_IN_FLIGHT:
                        kept.append(holding.popleft())
                        continue
                    n = self._admit(seq, budget, transfers)
                    if n is None:
                        blocked = True
                        break
                    holding.popleft()
                    admitted = True
                    running.append(seq)
                    seqs.append(seq)
                    nums.append(n)
                    budget -= n
                holding.extendleft(reversed(kept))
            while not blocked and waiting and budget > 0 and len(running) < self.max_num_seqs:
                seq = waiting[0]
                if seq.kv == KV_IN_FLIGHT:  # KV still loading: skipped, keeps its place
                    skipped.append(waiting.popleft())
                    continue
                n = self._admit(seq, budget, transfers)
                if n is None:
                    break
                waiting.popleft()
                admitted = True
                if n == 0:  # blocks reserved for a remote prefill; waits for the transfer
                    if seq.reload is not None:  # a tier load: held apart (see above)
                        self.holding.append(seq)
                    else:
                        skipped.append(seq)
                    continue
                running.append(seq)
                seqs.append(seq)
                nums.append(n)
                budget -= n
            waiting.extendleft(reversed(skipped))
        if not seqs and not transfers:
            return None
        self.steps += 1
        if not seqs:  # only reserved blocks for transfers: no forward pass
            return Step(now, seqs, nums, now, transfers=transfers)
        if (
            budget == 0
            and self.prefill_runs
            and not preempted
            and not transfers
            and not self.holds
            and not self._in_flight
            and not self._held
        ):
            run = self._prefill_run(now, seqs, nums)
            if run is not None:
                return run
        decode_only = all(n == 1 and s.generated > 0 for s, n in zip(seqs, nums, strict=True))
        if (
            self.closed_form
            and decode_only
            and not admitted
            and not preempted
            and n_running_scheduled == len(running)
        ):
            return self._decode_run(now, seqs, nums)
        dt = self.cost.step_s(*step_shape(seqs, nums))
        return Step(now, seqs, nums, now + dt, transfers=transfers)

    def _decode_run(self, now: float, seqs: list[Seq], nums: list[int]) -> Step:
        """A decode-only step, extended to the longest run of identical steps."""
        bs = self.bs
        k_max = min(s.max_output - s.generated for s in seqs)
        free = self.pool.num_free
        comp = [s.num_computed for s in seqs]
        have = [len(s.blocks) for s in seqs]

        def extra_blocks(k: int) -> int:
            return sum(max(-(-(c + k) // bs) - h, 0) for c, h in zip(comp, have, strict=True))

        if k_max > 1 and extra_blocks(k_max) > free:  # blocks run out first: largest k that fits
            lo, hi = 1, k_max - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if extra_blocks(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k_max = lo
        batch = len(seqs)
        a, b = self.cost.decode_affine(batch)
        kv0 = sum(comp) + batch
        step = Step(now, seqs, nums, now, k=k_max, a=a, b=b, kv0=kv0)
        if k_max == 1:
            step.t_end = now + self.cost.step_s((), batch, kv0)
        else:
            step.t_end = step.end_of(k_max)
        return step

    def _prefill_run(self, now: float, seqs: list[Seq], nums: list[int]) -> Step | None:
        """The steps up to the chunk before a prompt's last, or a decoder's end, as one run
        (None if fewer than two). Step 1's blocks are in place (`schedule`); steps 2..k get
        theirs here, as `_grow` would at each, and each step's time is summed in order."""
        last, c = seqs[-1], nums[-1]
        nc = last.num_computed
        if c < 2 or nc + c >= last.num_tokens:
            return None  # the prompt's last chunk: a token and maybe budget left next step
        dec = seqs[:-1]
        for s, n in zip(dec, nums, strict=False):
            if n != 1 or s.generated == 0 or s.num_computed + 1 != s.num_tokens:
                return None
        k_max = (last.num_tokens - nc - 1) // c  # chunks before the last one
        if dec:
            k_max = min(k_max, min(s.max_output - s.generated for s in dec))
        if k_max < 2:
            return None
        bs, pool = self.bs, self.pool
        batch = len(dec)
        kv1 = sum(s.num_computed for s in dec) + batch  # decode KV read in step 1
        step_s = self.cost.step_s
        t = now + step_s([(c, nc)], batch, kv1)
        ends = [t]
        extra = [0]
        grown = 0
        cache_full = self._cache_full
        # The prompt's blocks can be hashed once, after the loop, when none of them is cached
        # yet (in the pool's by-piece mode, the first one not being a piece's head says so):
        # the steps in between only evict and hash generated blocks, so no step could have
        # met one of them cached, and hashing them in one go leaves the same pieces.
        pos = last.blocks.n_hashed
        defer = pool.starts_no_piece(last.hashes, pos)
        hashed = dec if defer else seqs
        for j in range(2, k_max + 1):
            needs = [
                -(-(s.num_computed + j * m) // bs) - s.blocks.n_hashed - s.blocks.n_unhashed
                for s, m in zip(seqs, nums, strict=True)
            ]
            need = sum(n for n in needs if n > 0)
            if need > pool.num_free:
                break  # step j preempts: it is planned on its own
            for s, n in zip(seqs, needs, strict=True):
                if n > 0:
                    pool.allocate(s.blocks, n)
            for s, m in zip(hashed, nums, strict=False):
                cache_full(s, s.num_computed + j * m)
            grown += need
            t += step_s([(c, nc + (j - 1) * c)], batch, kv1 + (j - 1) * batch)
            ends.append(t)
            extra.append(grown)
        k = len(ends)
        if k < 2:
            return None
        if defer:
            cache_full(last, nc + k * c)
        return Step(now, seqs, nums, t, k=k, ends=ends, extra=extra)

    def cut(self, t: float) -> bool:
        """Something arrived at `t`: end the current run with the step in progress at `t`."""
        step = self.step
        if step is None or step.k <= 1 or step.ends is not None or step.t_end <= t:
            return False  # (a prefill run leaves no budget for what arrives)
        lo, hi = 1, step.k  # smallest j with end_of(j) >= t
        while lo < hi:
            mid = (lo + hi) // 2
            if step.end_of(mid) >= t:
                hi = mid
            else:
                lo = mid + 1
        if lo == step.k:
            return False
        step.k = lo
        step.t_end = step.end_of(lo)
        return True

    def stretch(self, now: float, cost_now: StepCost, cost_before: StepCost) -> bool:
        """From `now` the step in progress runs at another rate (a CPU host whose instances
        share its cores: another one started or ended a step). A run ends with the step in
        progress (the rest is planned at the new rate), whose remaining time is scaled by
        that step's cost ratio, new over old. True if its end moved."""
        step = self.step
        if step is None or step.t_end <= now:
            return False
        assert step.ends is None, "prefill runs are off when steps share cores"
        self.cut(now)
        if step.k > 1:  # a decode run's last step, k
            n = len(step.seqs)
            shape: tuple[list[tuple[int, int]], int, int] = ([], n, step.kv0 + n * (step.k - 1))
        else:
            shape = step_shape(step.seqs, step.num_new)
        before = cost_before.step_s(*shape)
        if before <= 0:
            return False
        step.t_end = now + (step.t_end - now) * cost_now.step_s(*shape) / before
        return True

    def needs_cut(self) -> bool:
        """Would a new waiting request change the next step? Not while the batch is full."""
        return len(self.running) < self.max_num_seqs

    def finish_step(self) -> list[Seq]:
        """Apply the current step's results; returns sequences that got a first token or
        finished (check `t_first_token` / `t_done`)."""
        step = self.step
        assert step is not None
        self.step = None
        t, k = step.t_end, step.k
        touched: list[Seq] = []
        done = False
        for s, n in zip(step.seqs, step.num_new, strict=True):
            if k > 1:
                if n > 1:  # a prefill run's prompt: k chunks, none its last
                    s.num_computed += k * n
                    continue
                s.num_computed += k
                s.generated += k
                s.num_tokens += k
                if step.ends is None:
                    grown = self._grow(s, 0)  # blocks for steps 2..k (k was sized to fit)
                    assert grown, "a decode run outgrew the free blocks it was sized for"
            else:
                s.num_computed += n
                if s.num_computed < s.num_tokens:
                    continue  # a prefill chunk that did not reach the end of the prompt
                s.generated += 1
                s.num_tokens += 1
                if s.generated == 1:
                    s.t_first_token = t
                    touched.append(s)
            if s.generated >= s.max_output:
                s.t_done = t
                done = True
                if self.tiers is not None:
                    self._turn_end(s, t)
                ttl = self.retention_ttl_s if s.retain_ttl_s is None else s.retain_ttl_s
                if s.retain_after and s.retain_key is not None and ttl > 0:
                    self._hold(s.retain_key, s, t + ttl)
                elif s.demote:
                    self.demoted["turn_end"] += 1
                    self._demote(s.blocks, t)
                    s.blocks = BlockTable()
                elif s.release_first:
                    self.finished_first += 1
                    self.pool.release_first(s.blocks)
                    s.blocks = BlockTable()
                elif not s.hold_blocks:
                    self.pool.release(s.blocks)
                else:
                    self._held += 1
                if not touched or touched[-1] is not s:
                    touched.append(s)
        if done:
            self.running = [s for s in self.running if s.t_done is None]
        if self.pool.evict_log:
            self._offload(t)
        return touched

    def _turn_end(self, seq: Seq, t: float) -> None:
        """Tiers at a turn's end: with write-through, its full blocks are stored below HBM
        (as vLLM's OffloadingConnector stores every computed block), and so they are when a
        lazy walk covers the pool (`InstanceTiers.store_at_free`); with retention, a session
        that goes on has its prompt's blocks held there for the TTL."""
        tiers = self.tiers
        assert tiers is not None
        if tiers.store_at_free and tiers.top is not None:
            hashes = seq.block_hashes(0, seq.blocks.n_hashed)
            if tiers.store_after_allocations:
                self._freed_unstored.append(hashes)  # at the next schedule (`_store_freed`)
            else:
                tiers.top.put([(0, hashes)], t)
        ttl = self.retention_ttl_s if seq.retain_ttl_s is None else seq.retain_ttl_s
        if seq.retain_after and ttl > 0:
            tiers.hold(seq.hashes, t + ttl)

    def _store_freed(self, now: float) -> None:
        """The lazy walk of the first scheduler step after turns ended. vLLM 0.32 runs it
        after the step's allocations (`Scheduler.schedule` allocates, then
        `build_connector_meta` walks the free queue), so the freed blocks a request admitted
        in that step took from the free queue are never stored, neither now nor at their
        eviction (they leave the eviction log), and the walk stores the turns' blocks still
        cached: measured on a real engine, benchmarks/tier_store_race_real.py (a request
        waiting for a finishing one's blocks takes its prompt's tail unstored)."""
        tiers = self.tiers
        assert tiers is not None and tiers.top is not None
        freed, self._freed_unstored = self._freed_unstored, []
        log = self.pool.evict_log
        if log:
            taken = set().union(*freed)
            kept: list[tuple[int, list[int], bool]] = []
            for lo, hs, below in log:
                if taken.isdisjoint(hs):
                    kept.append((lo, hs, below))
                    continue
                j = 0
                while j < len(hs):  # the stretches of the run that no ended turn freed
                    if hs[j] in taken:
                        j += 1
                        continue
                    k = j
                    while k < len(hs) and hs[k] not in taken:
                        k += 1
                    kept.append((lo + j, hs[j:k], below))
                    j = k
            self.pool.evict_log = kept
        for hashes in freed:
            n = self.pool.count_hit(hashes)
            if n:
                tiers.top.put([(0, hashes[:n])], now)

    # ---- events from the fleet -------------------------------------------------------

    def submit(self, seq: Seq) -> None:
        self.waiting.append(seq)
        if self.refresh_on_arrival and seq.num_computed == 0 and seq.kv != KV_NEEDS_BLOCKS:
            # Its cached prefix becomes the most recent free KV now, not at admission: the
            # requests admitted ahead of it then evict other blocks first.
            self.refreshed += self.pool.refresh(self._pool_hit(seq))

    def kv_landed(self, seq: Seq) -> None:
        """The transfer for a remote prefill, or a load from a tier below HBM, finished: the
        prompt's KV is here (vLLM's `_update_waiting_for_remote_kv` caches the blocks)."""
        seq.kv = KV_LOCAL
        self._in_flight -= 1
        if seq.reload is not None:
            host, disk = seq.reload[:2]
            seq.reload = None
            self._cache_full(seq, seq.num_computed)  # short of the prompt's last token
            for p in seq.blocks.pieces:  # also stored below (a write checks them in full)
                p.below = True
            self.external_hits += (host + disk) * self.bs
            return
        seq.num_computed = seq.num_tokens - 1  # vLLM recomputes the last prompt token
        self._cache_full(seq, seq.num_tokens)
        self.external_hits += seq.remote_tokens

    def release(self, seq: Seq) -> None:
        """PD prefill side: the decode instance has read the blocks."""
        self._held -= 1
        self.pool.release(seq.blocks)

    # ---- observation -----------------------------------------------------------------

    def kv_usage_at(self, t: float) -> float:
        """KV usage as a scrape at `t` sees it (inside a run of steps, blocks grow per step).
        `kv_usages` reads a whole fleet, most instances inline."""
        if self.holds:
            self._expire(t)  # holds whose TTL ran out are free by now, busy or idle
        step = self.step
        pool = self.pool
        used = pool.num_blocks - pool.num_free
        if step is not None and step.ends is not None:
            # Blocks of steps not started by `t` are not in use yet. A step starts when the
            # one before it ends, after a scrape at that same time (PLAN runs last).
            started = bisect_left(step.ends, t, 0, step.k - 1)  # beyond the first
            used -= step.extra[-1] - step.extra[started]  # type: ignore[index]
        elif step is not None and step.k > 1:
            lo = step.ended_by(t)  # steps already started beyond the first
            if lo > 0:
                bs = self.bs
                used += sum(
                    max(
                        -(-(s.num_computed + 1 + lo) // bs)
                        - s.blocks.n_hashed
                        - s.blocks.n_unhashed,
                        0,
                    )
                    for s in step.seqs
                )
        return min(used, self.pool.num_blocks) / self.pool.num_blocks


def step_shape(seqs: Sequence[Seq], nums: Sequence[int]) -> tuple[list[tuple[int, int]], int, int]:
    """What a `StepCost` prices of a step scheduling `nums[i]` tokens of `seqs[i]` (before
    the step): its prefill chunks (new tokens, tokens already in KV), decode batch and the
    decode batch's KV tokens."""
    chunks = []
    batch = kv = 0
    for s, n in zip(seqs, nums, strict=True):
        if n == 1 and s.generated > 0:
            batch += 1
            kv += s.num_computed + 1
        else:
            chunks.append((n, s.num_computed))
    return chunks, batch, kv


def kv_usages(instances: Sequence[Instance], t: float) -> list[float]:
    """`[inst.kv_usage_at(t) for inst in instances]`, for a scrape of the whole fleet.

    An instance with no KV hold and no run of steps in progress (idle, or mid one step) uses
    exactly its pool's blocks, so its usage is read inline, without a method call (the same
    float `kv_usage_at` returns): a scrape reads every instance, every scrape interval.
    """
    return [
        (inst.pool.next_fresh - inst.pool.queued) / inst.pool.num_blocks  # used / all
        if not inst.holds and (inst.step is None or inst.step.k == 1)
        else inst.kv_usage_at(t)
        for inst in instances
    ]
