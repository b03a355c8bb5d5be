"""KV retention across tool pauses in the simulated block pool (sim.kv_retention_ttl_s)."""

from __future__ import annotations

from typing import Any

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload.model import Block, Request, Session, Workload
from tests.sim.test_sim_fleet import PROFILE


def _workload(pause_s: float, churn_tokens: int = 1024) -> Workload:
    """Agent A: a 2,048-token turn, a tool pause, then a turn that extends it. Meanwhile B's
    one-off requests churn through more than the whole cache."""
    a0 = Request("a0", "A", 0, 2048, 4, (Block(1, 2048),))
    a1 = Request(
        "a1",
        "A",
        1,
        2048 + 512,
        4,
        (Block(1, 2048), Block(2, 512)),
        think_s=pause_s,
        parent_id="a0",
    )
    churn = [
        Session(
            f"B{k}",
            [
                Request(
                    f"b{k}",
                    f"B{k}",
                    0,
                    churn_tokens,
                    4,
                    (Block(100 + k, churn_tokens),),
                    arrival_s=0.5 + 0.2 * k,
                )
            ],
        )
        for k in range(12)
    ]
    return Workload([Session("A", [a0, a1]), *churn])


def _run(ttl: float, pause_s: float = 3.0, **sim: Any) -> dict[str, Any]:
    config = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 1}},  # replaced below
            "fleet": {"instances": 1, "kv_cache_tokens": 6144},
            "sim": {"kv_retention_ttl_s": ttl, **sim},
        }
    )
    fleet = SimFleet(config, _workload(pause_s), PROFILE)
    fleet.run()
    recs = {r.request_id: r for r in fleet.records}
    assert not any(r.error for r in recs.values())
    return {"recs": recs, "inst": fleet.instances[0]}


def test_without_retention_the_churn_evicts_the_paused_session() -> None:
    out = _run(ttl=0.0)
    assert out["recs"]["a1"].cached_tokens == 0


def test_a_ttl_longer_than_the_pause_keeps_the_session_warm() -> None:
    out = _run(ttl=10.0)
    assert out["recs"]["a1"].cached_tokens == 2048
    assert out["inst"].retained_releases["reused"] >= 1
    # the churn still ran: held blocks only took space from it, no request starved
    assert all(out["recs"][f"b{k}"].t_done is not None for k in range(12))


def test_a_ttl_shorter_than_the_pause_expires_first() -> None:
    out = _run(ttl=0.5)
    assert out["recs"]["a1"].cached_tokens == 0
    assert out["inst"].retained_releases["expired"] >= 1


def test_holds_give_way_under_memory_pressure() -> None:
    # a cache so small that the churn needs the held blocks: the holds are reclaimed
    config = load_config(
        {
            "backend": "sim",
            "workload": {"generator": {"sessions": 1}},
            "fleet": {"instances": 1, "kv_cache_tokens": 3200},
            "sim": {"kv_retention_ttl_s": 60.0},
        }
    )
    fleet = SimFleet(config, _workload(3.0, churn_tokens=1536), PROFILE)
    fleet.run()
    assert all(r.t_done is not None and r.error is None for r in fleet.records)
    assert fleet.instances[0].retained_releases["reclaimed"] >= 1


def test_default_leaves_run_ids_unchanged() -> None:
    base = {"backend": "sim", "workload": {"generator": {"sessions": 1}}}
    a = load_config(base)
    b = load_config({**base, "sim": {"kv_retention_ttl_s": 0.0}})
    c = load_config({**base, "sim": {"kv_retention_ttl_s": 5.0}})
    assert a.run_id() == b.run_id() != c.run_id()
    assert "kv_retention_ttl_s" not in a.canonical()["sim"]


@pytest.mark.parametrize("ttl", [0.0, 10.0])
def test_retention_is_deterministic(ttl: float) -> None:
    a, b = _run(ttl)["recs"], _run(ttl)["recs"]
    assert [r.to_dict() for r in a.values()] == [r.to_dict() for r in b.values()]
