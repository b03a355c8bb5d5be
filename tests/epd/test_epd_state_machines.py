"""Random call sequences never leak or double-count encoder-cache space (hypothesis)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentic_kvc.epd.cache_manager import CacheAccountingError, EncoderCacheManager
from agentic_kvc.epd.encode_scheduler import EncodeScheduler
from agentic_kvc.epd.preallocator import Metadata, MMInput, PDEncoderCache

REQS = st.sampled_from([f"r{i}" for i in range(5)])
INPUTS = st.integers(0, 2)
SIZES = st.integers(0, 40)
CAPACITY = 100
SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class ManagerMachine(RuleBasedStateMachine):
    """The manager against a plain model: legal calls match it, illegal ones raise and change
    nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.m = EncoderCacheManager(CAPACITY)
        self.pre: dict[tuple[str, int], int] = {}
        self.cached: dict[tuple[str, int], int] = {}

    def _free(self) -> int:
        return CAPACITY - sum(self.pre.values()) - sum(self.cached.values())

    def _expect_error(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        before = (self.m.num_free, self.m.preallocated(), self.m.cached())
        with pytest.raises(CacheAccountingError):
            fn(*args)
        assert (self.m.num_free, self.m.preallocated(), self.m.cached()) == before

    @rule(req=REQS, inp=INPUTS, size=SIZES)
    def preallocate(self, req: str, inp: int, size: int) -> None:
        key = (req, inp)
        if key in self.pre or key in self.cached or size > self._free():
            self._expect_error(self.m.preallocate, req, inp, size)
        else:
            assert self.m.can_preallocate(size)
            self.m.preallocate(req, inp, size)
            self.pre[key] = size

    @rule(req=REQS, inp=INPUTS)
    def depreallocate(self, req: str, inp: int) -> None:
        if (req, inp) in self.pre:
            assert self.m.depreallocate(req, inp) == self.pre.pop((req, inp))
        else:
            self._expect_error(self.m.depreallocate, req, inp)

    @rule(req=REQS, inp=INPUTS)
    def finalize(self, req: str, inp: int) -> None:
        if (req, inp) in self.pre:
            self.m.finalize_allocation(req, inp)
            self.cached[(req, inp)] = self.pre.pop((req, inp))
        else:
            self._expect_error(self.m.finalize_allocation, req, inp)

    @rule(req=REQS, inp=INPUTS, size=SIZES)
    def allocate(self, req: str, inp: int, size: int) -> None:
        key = (req, inp)
        if key in self.pre or key in self.cached or size > self._free():
            self._expect_error(self.m.allocate, req, inp, size)
        else:
            self.m.allocate(req, inp, size)
            self.cached[key] = size

    @rule(req=REQS, inp=INPUTS, size=SIZES)
    def deallocate(self, req: str, inp: int, size: int) -> None:
        if self.cached.get((req, inp)) == size:
            self.m.deallocate(req, inp, size)
            del self.cached[(req, inp)]
        else:
            self._expect_error(self.m.deallocate, req, inp, size)

    @rule(req=REQS)
    def abort(self, req: str) -> None:
        expect = sum(v for k, v in (*self.pre.items(), *self.cached.items()) if k[0] == req)
        assert self.m.free_request(req) == expect
        self.pre = {k: v for k, v in self.pre.items() if k[0] != req}
        self.cached = {k: v for k, v in self.cached.items() if k[0] != req}

    @invariant()
    def matches_model(self) -> None:
        self.m.check()
        assert self.m.num_free == self._free()
        assert self.m.preallocated() == self.pre
        assert self.m.cached() == self.cached

    def teardown(self) -> None:
        for req in {k[0] for k in (*self.pre, *self.cached)}:
            self.m.free_request(req)
        assert self.m.num_free == CAPACITY


class EPDMachine(RuleBasedStateMachine):
    """One E scheduler and one PD side exchanging metadata, notices and data through message
    lists delivered in random order; requests get prefix hits, compute tokens, finish, abort."""

    def __init__(self) -> None:
        super().__init__()
        self.e = EncodeScheduler(capacity=CAPACITY, budget=60)
        self.pd = PDEncoderCache(capacity=CAPACITY)
        self.rng = random.Random(0)
        self.specs: dict[str, list[MMInput]] = {}
        self.on_e: set[str] = set()
        self.on_pd: set[str] = set()
        self.pd_done: set[str] = set()
        self.metas: list[Metadata] = []  # E -> PD in flight
        self.notices: list = []  # PD -> E in flight
        self.data: list[tuple[str, int]] = []  # E -> PD cache data in flight
        self.answers: dict[tuple[str, int], int] = {}
        self.awaiting: set[tuple[str, int]] = set()  # accepted by PD, data not yet there
        self.orphaned: set[tuple[str, int]] = set()  # accepted, but E had aborted it
        self.n = 0

    @rule(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=3))
    def new_request(self, sizes: list[int]) -> None:
        req = f"q{self.n}"
        self.n += 1
        offset, spans = 5, []
        for s in sizes:
            spans.append(MMInput(offset, s))
            offset += s + 3
        self.specs[req] = spans
        self.e.add_request(req, sizes)
        self.on_e.add(req)

    @rule()
    def encode_step(self) -> None:
        for job in self.e.schedule():
            for i, size in enumerate(job.sizes):
                self.metas.append(Metadata(job.req_id, i, size, "e0"))

    @precondition(lambda self: any(r not in self.on_pd for r in self.on_e))
    @rule(data=st.data(), prefix=st.integers(0, 80))
    def send_to_pd(self, data: st.DataObject, prefix: int) -> None:
        req = data.draw(st.sampled_from(sorted(r for r in self.on_e if r not in self.on_pd)))
        self.on_pd.add(req)
        self.pd.add_request(req, self.specs[req], num_computed=prefix)

    @precondition(lambda self: self.metas)
    @rule(data=st.data())
    def deliver_meta(self, data: st.DataObject) -> None:
        meta = self.metas.pop(data.draw(st.integers(0, len(self.metas) - 1)))
        self.pd.prealloc.receive_metadata(meta)

    @rule()
    def pd_step(self) -> None:
        for n in self.pd.perform_preallocations():
            self.answers[n.key] = self.answers.get(n.key, 0) + 1
            self.notices.append(n)
            if n.accepted:
                self.awaiting.add(n.key)

    @precondition(lambda self: self.notices)
    @rule(data=st.data())
    def deliver_notice(self, data: st.DataObject) -> None:
        n = self.notices.pop(data.draw(st.integers(0, len(self.notices) - 1)))
        if not n.accepted:
            self.e.release([n.key])
        elif n.key in self.e.allocated():
            self.data.append(n.key)  # send; E frees once the transfer is done
            self.e.release([n.key])
        else:
            self.awaiting.discard(n.key)  # aborted on E: the data never comes
            self.orphaned.add(n.key)

    @precondition(lambda self: self.data)
    @rule(data=st.data())
    def deliver_data(self, data: st.DataObject) -> None:
        req, inp = self.data.pop(data.draw(st.integers(0, len(self.data) - 1)))
        self.pd.on_injected(req, inp)
        self.awaiting.discard((req, inp))

    @precondition(lambda self: self.on_pd - self.pd_done)
    @rule(data=st.data(), tokens=st.integers(0, 150))
    def compute(self, data: st.DataObject, tokens: int) -> None:
        req = data.draw(st.sampled_from(sorted(self.on_pd - self.pd_done)))
        self.pd.on_tokens_computed(req, tokens)

    @precondition(lambda self: self.on_pd - self.pd_done)
    @rule(data=st.data())
    def finish_or_abort(self, data: st.DataObject) -> None:
        req = data.draw(st.sampled_from(sorted(self.on_pd - self.pd_done)))
        self.pd_done.add(req)
        self._pd_finish(req)

    @precondition(lambda self: self.on_e)
    @rule(data=st.data())
    def abort_on_e(self, data: st.DataObject) -> None:
        self.e.abort(data.draw(st.sampled_from(sorted(self.on_e))))

    def _pd_finish(self, req: str) -> None:
        for n in self.pd.finish_request(req):
            self.answers[n.key] = self.answers.get(n.key, 0) + 1
            self.notices.append(n)

    @invariant()
    def accounting(self) -> None:
        self.e.manager.check()
        self.pd.manager.check()
        assert all(v == 1 for v in self.answers.values()), "an input answered twice"
        live = self.on_pd - self.pd_done
        keys = (*self.pd.manager.preallocated(), *self.pd.manager.cached())
        assert {k[0] for k in keys} <= live
        assert sum(self.e.allocated().values()) == CAPACITY - self.e.manager.num_free
        # No orphans: a PD reservation waits for data; cached data is still needed; E space is
        # held only for inputs someone will still answer or send.
        assert set(self.pd.manager.preallocated()) <= self.awaiting | self.orphaned
        for req, inp in self.pd.manager.cached():
            assert self.pd.prealloc.is_needed(req, inp)
        notices = [*self.notices, *self.pd.prealloc.outbox()]
        in_flight = {m.key for m in self.metas} | {n.key for n in notices}
        assert set(self.e.allocated()) <= in_flight | self.pd.prealloc.unanswered()

    def teardown(self) -> None:
        # Every request reaches PD and ends; all messages are delivered: nothing may remain.
        for req in sorted(self.on_e - self.on_pd):
            self.on_pd.add(req)
            self.pd.add_request(req, self.specs[req])
        for _ in range(1000):
            self.encode_step()
            self.pd_step()
            while self.metas or self.notices or self.data:
                while self.metas:
                    self.pd.prealloc.receive_metadata(self.metas.pop())
                self.pd_step()
                while self.notices:
                    n = self.notices.pop()
                    if n.accepted and n.key in self.e.allocated():
                        self.data.append(n.key)
                    self.e.release([n.key])
                while self.data:
                    self.pd.on_injected(*self.data.pop())
            if not self.e.num_waiting():
                break
        for req in sorted(self.on_pd - self.pd_done):
            self.pd_done.add(req)
            self._pd_finish(req)
        while self.notices:
            self.e.release([self.notices.pop().key])
        self.data.clear()
        assert self.pd.manager.num_free == CAPACITY
        assert self.e.manager.num_free == CAPACITY, self.e.allocated()


TestManager = ManagerMachine.TestCase
TestManager.settings = SETTINGS
TestEPD = EPDMachine.TestCase
TestEPD.settings = SETTINGS
