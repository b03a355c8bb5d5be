"""The replayer on a subagent DAG (tests/data/agentic_dag.jsonl) against a fake streaming server:
children after their dependencies, siblings concurrent, joins last, a cap that cannot deadlock."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentic_kvc.replay.driver import ReplaySettings, replay_async
from agentic_kvc.workload.formats import read_workload
from agentic_kvc.workload.model import Request

from .fake_engine import FakeEngine

DAG = Path(__file__).resolve().parents[1] / "data" / "agentic_dag.jsonl"


def _tokens(req: Request) -> list[int]:
    return list(range(1, req.input_tokens + 1))


def _run(**kw: object) -> tuple[dict, FakeEngine]:
    eng = FakeEngine(token_delay_s=0.01, first_delay_s=0.02)

    async def go():
        runner, url = await eng.start()
        try:
            s = ReplaySettings(target=url, model="m", progress=False, **kw)  # type: ignore[arg-type]
            return await asyncio.wait_for(replay_async(read_workload(DAG), s, _tokens), 30)
        finally:
            await runner.cleanup()

    recs = asyncio.run(go())
    return {r.request_id: r for r in recs}, eng


def test_children_after_dependencies_siblings_together_join_last() -> None:
    rec, eng = _run()
    assert len(rec) == 7 and not any(r.error for r in rec.values())
    for child in ("a0", "b0"):
        assert rec[child].t_proxy_recv >= rec["m0"].t_done
        assert rec[child].t_proxy_recv < rec["m0"].t_done + 0.1  # spawned at once, no wait
    assert rec["a0"].t_proxy_recv < rec["b0"].t_done and rec["b0"].t_proxy_recv < rec["a0"].t_done
    assert rec["a1"].t_proxy_recv >= rec["a0"].t_done + 0.2 - 0.005
    assert rec["m1"].t_proxy_recv >= max(rec["a1"].t_done, rec["b0"].t_done) + 0.4 - 0.005
    assert {s["id"] for s in eng.seen} == set(rec)  # each request sent exactly once
    assert len(eng.seen) == len(rec)


def test_a_session_cap_of_one_still_finishes_a_parent_that_waits_on_subagents() -> None:
    rec, _ = _run(max_inflight_sessions=1)
    assert len(rec) == 7 and not any(r.error for r in rec.values())
    assert rec["m1"].t_proxy_recv >= max(rec["a1"].t_done, rec["b0"].t_done)
