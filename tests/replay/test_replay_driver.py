"""The replay driver against a fake streaming server: pacing, caps, errors, records."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from agentic_kvc.replay.driver import ReplaySettings, replay_async
from agentic_kvc.workload.model import Block, Request, Session, Workload

from .fake_engine import FakeEngine


def _req(sid: str, turn: int, arrival: float = 0.0, think: float = 0.0, out: int = 4) -> Request:
    return Request(
        request_id=f"{sid}-{turn}",
        session_id=sid,
        turn=turn,
        input_tokens=8,
        output_tokens=out,
        blocks=(Block(1, 4), Block(2 + turn, 4)),
        arrival_s=arrival,
        think_s=think,
    )


def _tokens(req: Request) -> list[int]:
    return list(range(req.input_tokens))


def _run(engine: FakeEngine, workload: Workload, **kw: object) -> tuple[list, float]:
    async def go():
        runner, url = await engine.start()
        try:
            s = ReplaySettings(target=url, model="m", progress=False, **kw)  # type: ignore[arg-type]
            t0 = time.monotonic()
            recs = await replay_async(workload, s, _tokens)
            return recs, time.monotonic() - t0
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def test_closed_loop_waits_for_previous_turn_plus_think() -> None:
    eng = FakeEngine(token_delay_s=0.02, first_delay_s=0.02)
    wl = Workload([Session("s", [_req("s", 0), _req("s", 1, think=0.2), _req("s", 2, think=0.1)])])
    recs, _ = _run(eng, wl)
    assert [r.turn for r in recs] == [0, 1, 2]
    assert all(r.error is None for r in recs)
    for prev, nxt in itertools.pairwise(recs):
        gap = nxt.t_proxy_recv - prev.t_done
        think = wl.sessions[0].requests[nxt.turn].think_s
        assert gap >= think - 0.005, (gap, think)
        assert gap < think + 0.15
    r = recs[0]
    assert r.output_tokens == 4 and r.input_tokens == 8 and r.cached_tokens == 3
    assert len(r.itl_s) == 3
    assert r.ttft_s is not None and r.ttft_s >= 0.02
    assert r.e2e_s == pytest.approx(r.ttft_s + sum(r.itl_s), abs=1e-6)
    assert r.tpot_s == pytest.approx(sum(r.itl_s) / 3, abs=1e-6)
    # the receipt header becomes record fields
    assert (r.route_class, r.reason, r.prefill_instance, r.predicted_cached_tokens) == (
        "WARM",
        "test",
        1,
        7,
    )
    # the request carries the session both ways and the workload's request id
    body = eng.seen[0]["body"]
    assert body["user"] == "s" and eng.seen[0]["session"] == "s" and eng.seen[0]["id"] == "s-0"
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] and body["temperature"] == 0 and body["max_tokens"] == 4


def test_each_request_says_whether_it_is_its_sessions_last_turn() -> None:
    # The finish signal the simulator gives every policy (RequestView.last_turn).
    eng = FakeEngine()
    wl = Workload(
        [Session("s", [_req("s", 0), _req("s", 1), _req("s", 2)]), Session("t", [_req("t", 0)])]
    )
    _run(eng, wl, time_scale=0.0)
    last = {seen["id"]: seen["last"] for seen in eng.seen}
    assert last == {"s-0": "false", "s-1": "false", "s-2": "true", "t-0": "true"}


def test_time_scale_zero_skips_think_waits() -> None:
    wl = Workload([Session("s", [_req("s", 0), _req("s", 1, think=5.0)])])
    recs, wall = _run(FakeEngine(), wl, time_scale=0.0)
    assert wall < 2.0 and all(r.error is None for r in recs)


def test_open_loop_sends_at_arrival_without_waiting_for_turns() -> None:
    eng = FakeEngine(token_delay_s=0.1)  # each request takes ~0.3 s
    wl = Workload([Session("s", [_req("s", 0, arrival=0.0), _req("s", 1, arrival=0.05)])])
    recs, _ = _run(eng, wl, mode="open")
    assert recs[1].t_proxy_recv < recs[0].t_done  # overlapped: not closed loop
    assert recs[1].arrival_s - recs[0].arrival_s == pytest.approx(0.05, abs=0.02)


def test_session_cap_limits_concurrent_sessions() -> None:
    eng = FakeEngine(token_delay_s=0.02)
    wl = Workload([Session(f"s{i}", [_req(f"s{i}", 0), _req(f"s{i}", 1)]) for i in range(6)])
    recs, _ = _run(eng, wl, max_inflight_sessions=2)
    assert len(recs) == 12 and all(r.error is None for r in recs)
    assert eng.max_inflight_sessions == 2


def test_errors_are_recorded_never_hang() -> None:
    eng = FakeEngine(
        fail_status={"a-0": 503}, drop_after={"b-0": 2}, hang={"c-0"}, token_delay_s=0.01
    )
    wl = Workload([Session(s, [_req(s, 0, out=6), _req(s, 1)]) for s in ("a", "b", "c")])
    recs, wall = _run(eng, wl, timeout_s=1.0)
    by = {r.request_id: r for r in recs}
    assert by["a-0"].error.startswith("HTTP 503")
    assert by["b-0"].error is not None and by["b-0"].t_done is None
    assert by["c-0"].error == "timeout after 1 s"
    # a failed turn does not end its session: the next turn still runs and succeeds
    assert all(by[f"{s}-1"].error is None for s in "abc")
    assert wall < 5.0


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="http"):
        ReplaySettings(target="localhost:8000", model="m")
    with pytest.raises(ValueError, match="max_inflight"):
        ReplaySettings(target="http://x", model="m", max_inflight_sessions=0)
