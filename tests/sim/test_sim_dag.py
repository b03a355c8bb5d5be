"""Agentic DAGs in the simulator: subagents start after the turn that spawns them, run
concurrently, and the parent's join turn waits for all of them (tests/data/agentic_dag.jsonl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload
from tests.sim.test_sim_fleet import PROFILE

DAG = Path(__file__).resolve().parents[1] / "data" / "agentic_dag.jsonl"


def _run(mode: str = "closed", **extra: Any) -> dict[str, Any]:
    config = load_config(
        {
            "backend": "sim",
            "workload": {"trace": str(DAG), "mode": mode},
            "fleet": {"instances": 2, "kv_cache_tokens": 65536},
            "policy": {"name": "least_loaded"},
            **extra,
        }
    )
    workload = load_workload(config.workload, config.seed)
    fleet = SimFleet(config, workload, PROFILE)
    fleet.run()
    return {r.request_id: r for r in fleet.records}


def test_children_start_only_after_their_dependencies() -> None:
    rec = _run()
    assert len(rec) == 7 and not any(r.error for r in rec.values())
    m0, a0, b0, a1, m1 = (rec[k] for k in ("m0", "a0", "b0", "a1", "m1"))
    # fan-out: both subagents are released when the spawning turn is done, side by side
    assert a0.t_proxy_recv == pytest.approx(m0.t_done)
    assert b0.t_proxy_recv == pytest.approx(m0.t_done)
    assert a0.t_first_token > b0.t_proxy_recv and b0.t_first_token > a0.t_proxy_recv
    # a subagent's own next turn: its tool wait after its previous turn
    assert a1.t_proxy_recv == pytest.approx(a0.t_done + 0.2)
    # join: delay + tool wait after the last subagent finished, not before
    assert m1.t_proxy_recv == pytest.approx(max(a1.t_done, b0.t_done) + 0.4)
    assert m1.t_proxy_recv > m0.t_done + 0.4
    # the independent session is not held back by any of it
    assert rec["solo0"].t_proxy_recv == 0.0
    assert rec["solo1"].t_proxy_recv == pytest.approx(rec["solo0"].t_done + 0.05)


def test_a_session_cap_counts_subagents_in_their_parent_slot() -> None:
    rec = _run(replay={"max_inflight_sessions": 1})
    assert len(rec) == 7 and all(r.t_done is not None for r in rec.values())
    assert rec["m1"].t_proxy_recv >= max(rec["a1"].t_done, rec["b0"].t_done)
    # "main" (first by start time, then id) holds the one slot until its join turn is done;
    # its subagents ran inside it, and "solo" waited for it
    assert rec["solo0"].t_proxy_recv == pytest.approx(rec["m1"].t_done)


def test_open_loop_holds_a_dependent_request_until_its_dependencies_are_done() -> None:
    rec = _run(mode="open")
    assert rec["m1"].t_proxy_recv >= max(rec["a1"].t_done, rec["b0"].t_done)
    assert rec["a0"].t_proxy_recv >= rec["m0"].t_done
