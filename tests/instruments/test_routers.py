"""Several routers: one replica is the single router exactly; more replicas, each with its own
accounting and index, spread the load blindly and lose affinity when spread at random."""

from __future__ import annotations

import json

import pytest

from agentic_kvc.instruments.routers import measures, run_routers
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload

from .scenarios import PROFILE, cfg, dumps


@pytest.mark.parametrize("policy", ["lmetric", "unified", "sglang_cache_aware", "dynamo_kv"])
@pytest.mark.parametrize("view", ["estimated", "exact"])
def test_one_replica_reproduces_the_single_router_run(policy: str, view: str) -> None:
    config = cfg(**{"policy.name": policy, "policy.cache_view": view, "fleet.instances": 3})
    workload = load_workload(config.workload, config.seed)
    plain = SimFleet(config, workload, PROFILE)
    plain.run()
    records, samples, _ = run_routers(config, workload, PROFILE, replicas=1, spread="random")
    assert dumps(records) == dumps(plain.records)
    assert [json.dumps(s.to_dict()) for s in samples] == [
        json.dumps(s.to_dict()) for s in plain.samples
    ]


def test_replicas_route_on_their_own_state() -> None:
    config = cfg(**{"policy.name": "lmetric", "workload.generator.sessions": 12})
    workload = load_workload(config.workload, config.seed)
    one = measures(*run_routers(config, workload, PROFILE, replicas=1)[:2])
    rec, smp, replica_of = run_routers(config, workload, PROFILE, replicas=4, spread="random")
    four = measures(rec, smp)
    assert set(replica_of.values()) == {0, 1, 2, 3}
    assert four["requests"] == one["requests"] == len(workload)
    # At random, a session's turns meet routers that never saw it: affinity is lost.
    assert four["affinity_loss"] > one["affinity_loss"]
    by_session = run_routers(config, workload, PROFILE, replicas=4, spread="session")[2]
    sessions: dict[str, set[int]] = {}
    for r in workload.requests():
        sessions.setdefault(r.session_id, set()).add(by_session[r.request_id])
    assert all(len(v) == 1 for v in sessions.values())
