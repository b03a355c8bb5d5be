"""The launcher's process handling with fake engines (fast): health waits, fail-fast, proxy."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest

from agentic_kvc.replay.driver import ReplaySettings, replay
from agentic_kvc.serve.launcher import FleetPlan, InstanceSpec, LaunchError, VllmFleet
from agentic_kvc.serve.ports import free_port
from agentic_kvc.serve.services import ProxyProcess, RedisServer, redis_available
from agentic_kvc.workload.model import Block, Request, Session, Workload


def _fake_spec(i: int) -> InstanceSpec:
    port = free_port()
    argv = [sys.executable, "-m", "agentic_kvc.proxy.fake_engine", "--port", str(port)]
    return InstanceSpec(i, port, argv, env={})


def _plan(specs: list[InstanceSpec]) -> FleetPlan:
    return FleetPlan("cpu", "fake", "fake-model", specs)


def test_dead_instance_fails_fast_with_log_tail(tmp_path: Path) -> None:
    bad = InstanceSpec(1, free_port(), [sys.executable, "-c", "print('no such flag'); exit(3)"], {})
    fleet = VllmFleet(_plan([_fake_spec(0), bad]), tmp_path, startup_timeout_s=60)
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"(?s)instance 1 exited with code 3.*no such flag"):
        fleet.start()
    assert time.monotonic() - t0 < 30  # not the whole timeout
    assert fleet.remaining_pids() == set()  # the healthy one was stopped too


def test_health_timeout_names_the_instance(tmp_path: Path) -> None:
    mute = InstanceSpec(0, free_port(), ["sleep", "60"], {})
    fleet = VllmFleet(_plan([mute]), tmp_path, startup_timeout_s=1.0)
    with pytest.raises(LaunchError, match="instance 0 not healthy after 1 s"):
        fleet.start()
    assert fleet.remaining_pids() == set()


def test_fleet_proxy_and_replay_end_to_end(tmp_path: Path) -> None:
    wl = Workload(
        [
            Session(
                f"s{k}",
                [
                    Request(f"s{k}-{t}", f"s{k}", t, 64, 3, (Block(k, 32), Block(100 + t, 32)))
                    for t in range(3)
                ],
            )
            for k in range(2)
        ]
    )
    records = tmp_path / "proxy_records.jsonl"
    with VllmFleet(_plan([_fake_spec(0), _fake_spec(1)]), tmp_path / "logs") as fleet:
        assert all(s is not None for s in fleet.startup_s)
        with ProxyProcess(fleet.urls, "round_robin", tmp_path / "logs", records=records) as proxy:
            assert httpx.get(proxy.url + "/health").status_code == 200
            settings = ReplaySettings(target=proxy.url, model="fake-model", progress=False)
            recs = replay(wl, settings, lambda r: list(range(r.input_tokens)))
        desc = fleet.describe()
        pids = fleet.remaining_pids()
        assert pids  # still running inside the block
    assert fleet.remaining_pids() == set() and not proxy.alive()
    assert len(recs) == 6 and all(r.error is None for r in recs)
    assert {r.prefill_instance for r in recs} == {0, 1}  # round robin spread them
    assert all(r.policy == "round_robin" and r.route_class for r in recs)
    assert all(r.output_tokens == 3 and r.ttft_s is not None for r in recs)
    assert records.is_file() and len(records.read_text().splitlines()) == 6
    assert [i["log"] for i in desc["instances"]] == [
        str(tmp_path / "logs" / "vllm-0.log"),
        str(tmp_path / "logs" / "vllm-1.log"),
    ]


@pytest.mark.skipif(redis_available() is None, reason="redis-server not installed")
def test_redis_starts_answers_and_stops(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as redis:
        assert redis.ping()
        assert redis.url.startswith("redis://127.0.0.1:")
    assert not redis.alive() and not redis.ping()
    assert redis.proc is not None and redis.proc.remaining() == set()
