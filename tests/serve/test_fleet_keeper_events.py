"""A kept fleet (one per batch of real runs) with KV events and a KV tier: the runs of a batch
launch it with the same flags (event sockets in the keeper's directory), so it is started
once, and between runs both its prefix cache and its tier are emptied (issue 30 item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.serve import run_backend
from agentic_kvc.serve.kv_transfer_flags import kv_launch_for_run
from agentic_kvc.serve.run_backend import FleetKeeper, _fleet_for, reset_prefix_caches


class _Resp:
    status_code = 200

    def json(self) -> dict[str, Any]:
        return {"success": True}


@pytest.mark.parametrize(("external", "query"), [(False, ""), (True, "?reset_external=true")])
def test_reset_asks_for_the_tier_too_only_when_told(monkeypatch, external, query) -> None:
    posted: list[str] = []
    monkeypatch.setattr(run_backend.httpx, "post", lambda url, **_: posted.append(url) or _Resp())
    reset_prefix_caches(["http://a", "http://b"], external=external)
    assert posted == [f"http://a/reset_prefix_cache{query}", f"http://b/reset_prefix_cache{query}"]


def test_events_in_the_keepers_directory_give_every_run_the_same_flags() -> None:
    keeper = FleetKeeper()
    try:
        one = kv_launch_for_run("sglang_cache_aware", {}, "exact", 2, events_dir=keeper.events_dir)
        two = kv_launch_for_run("predicted_ttft", {}, "exact", 2, events_dir=keeper.events_dir)
        assert one is not None and two is not None
        assert one.args == two.args and one.events_endpoints == two.events_endpoints
        assert all(e.startswith(f"ipc://{keeper.events_dir}/") for e in one.events_endpoints)
        folder = Path(keeper.events_dir)
        assert folder.is_dir()
    finally:
        keeper.close()
    assert not folder.exists()  # the sockets' directory goes with the keeper


class _StubFleet:
    def __init__(self) -> None:
        self.urls = ["http://x:1", "http://x:2"]
        self.model_name = "tiny"
        self.stopped = False

    def start(self) -> _StubFleet:
        return self

    def all_alive(self) -> bool:
        return True

    def stop(self) -> None:
        self.stopped = True


def _config(host_gib: float, policy: str) -> Any:
    return load_config(
        {
            "backend": "vllm",
            "workload": {"generator": {"sessions": 1}},
            "fleet": {"instances": 2, "hardware": "cpu-tiny", "block_size": 32},
            "policy": {"name": policy, "cache_view": "exact"},
        },
        [f"fleet.kv_tiers.host_gib={host_gib}"],
    )


@pytest.mark.parametrize("host_gib", [0.0, 0.0625])
def test_events_only_runs_share_one_fleet_and_reset_its_tier(
    monkeypatch, tmp_path: Path, host_gib: float
) -> None:
    started: list[dict[str, Any]] = []
    resets: list[bool] = []

    def from_config(fleet: Any, logs: Path, device: str, **kw: Any) -> _StubFleet:
        started.append(kw)
        return _StubFleet()

    monkeypatch.setattr(run_backend.VllmFleet, "from_config", staticmethod(from_config))
    monkeypatch.setattr(
        run_backend, "reset_prefix_caches", lambda urls, external=False: resets.append(external)
    )
    flushed: list[str] = []
    monkeypatch.setattr(run_backend, "flush_kv_events", lambda urls, model: flushed.append(model))
    keeper = FleetKeeper()
    try:
        owners = []
        for policy in ("sglang_cache_aware", "predicted_ttft", "dynamo_kv"):
            cfg = _config(host_gib, policy)
            kv = kv_launch_for_run(policy, {}, "exact", 2, events_dir=keeper.events_dir)
            assert kv is not None
            plan = {"per_instance_args": kv.args, "per_instance_env": kv.env}
            logs = tmp_path / policy / "logs"
            with _fleet_for(cfg, logs, plan, keeper, events_only=True) as (_, shared_from):
                owners.append(shared_from)
        assert len(started) == 1  # one engine start for the three runs
        env = started[0]["per_instance_env"]
        assert all(e["VLLM_SERVER_DEV_MODE"] == "1" and e["PYTHONHASHSEED"] for e in env)
        assert started[0]["per_instance_args"] == kv.args
        assert owners == [None, str(tmp_path / "sglang_cache_aware"), owners[1]]
        assert resets == [host_gib > 0] * 2  # the tier is emptied only when there is one
        # ... and then its reset's events are published before the next proxy subscribes.
        assert flushed == (["tiny"] * 2 if host_gib > 0 else [])
    finally:
        keeper.close()


def test_a_pd_connector_still_gets_a_fleet_of_its_own(monkeypatch, tmp_path: Path) -> None:
    class _Own(_StubFleet):
        def __enter__(self) -> _Own:
            return self

        def __exit__(self, *exc: object) -> None:
            self.stop()

    started: list[_Own] = []

    def from_config(*_a: Any, **_k: Any) -> _Own:
        started.append(_Own())
        return started[-1]

    monkeypatch.setattr(run_backend.VllmFleet, "from_config", staticmethod(from_config))
    keeper = FleetKeeper()
    cfg = _config(0.0, "sglang_cache_aware")
    plan = {"per_instance_args": [["--kv-transfer-config", "{}"]] * 2}
    for _ in range(2):
        with _fleet_for(cfg, tmp_path / "logs", plan, keeper, events_only=False) as (_, shared):
            assert shared is None
    assert len(started) == 2 and all(f.stopped for f in started)
    keeper.close()


def test_flush_sends_a_one_token_prompt_to_every_engine(monkeypatch) -> None:
    from agentic_kvc.serve.run_backend import flush_kv_events

    sent: list[tuple[str, dict[str, Any]]] = []

    class _Ok:
        def raise_for_status(self) -> None:
            pass

    monkeypatch.setattr(
        run_backend.httpx, "post", lambda url, json, **_: sent.append((url, json)) or _Ok()
    )
    flush_kv_events(["http://a", "http://b"], "tiny")
    assert [u for u, _ in sent] == ["http://a/v1/completions", "http://b/v1/completions"]
    assert all(b["prompt"] == [0] and b["max_tokens"] == 1 for _, b in sent)


def test_refresh_on_arrival_reaches_the_engines_env_and_keys_the_kept_fleet(
    monkeypatch, tmp_path: Path
) -> None:
    """`sim.refresh_on_arrival` turns the engines' plugin on (serve/vllm_refresh_on_arrival.py)
    through the launcher's env, and a kept fleet is not shared between runs with and without it."""
    from agentic_kvc.serve.vllm_refresh_on_arrival import ENV

    started: list[dict[str, Any]] = []

    def from_config(fleet: Any, logs: Path, device: str, **kw: Any) -> _StubFleet:
        started.append(kw)
        return _StubFleet()

    monkeypatch.setattr(run_backend.VllmFleet, "from_config", staticmethod(from_config))
    monkeypatch.setattr(run_backend, "reset_prefix_caches", lambda urls, external=False: None)
    keeper = FleetKeeper()
    try:
        for refresh in (False, False, True):
            cfg = _config(0.0, "round_robin")
            cfg.sim.refresh_on_arrival = refresh
            with _fleet_for(cfg, tmp_path / "logs", {}, keeper):
                pass
    finally:
        keeper.close()
    assert len(started) == 2  # the second run takes the first's fleet; the third does not
    assert [ENV in e for e in started[0]["per_instance_env"]] == [False, False]
    assert [e.get(ENV) for e in started[1]["per_instance_env"]] == ["1", "1"]
    # Without a keeper the env goes through the launcher's extra_env.
    started.clear()
    cfg = _config(0.0, "round_robin")
    cfg.sim.refresh_on_arrival = True

    class _Own(_StubFleet):
        def __enter__(self) -> _Own:
            return self

        def __exit__(self, *exc: object) -> None:
            self.stop()

    def own(fleet: Any, logs: Path, device: str, **kw: Any) -> _Own:
        started.append(kw)
        return _Own()

    monkeypatch.setattr(run_backend.VllmFleet, "from_config", staticmethod(own))
    with _fleet_for(cfg, tmp_path / "logs2", {}, None):
        pass
    assert started == [{"extra_env": {ENV: "1"}}]


@pytest.mark.parametrize(("keep", "starts"), [(1, 3), (2, 2)])
def test_a_keeper_of_two_alternates_two_launches_without_restarting(
    monkeypatch, tmp_path: Path, keep: int, starts: int
) -> None:
    """Interleaved variants that need engines launched apart (refresh on and off) keep both
    fleets with `keep=2`; with one, each switch stops a fleet and starts the other. Two launches
    get event-socket directories of their own."""
    started: list[_StubFleet] = []

    def from_config(fleet: Any, logs: Path, device: str, **kw: Any) -> _StubFleet:
        started.append(_StubFleet())
        return started[-1]

    monkeypatch.setattr(run_backend.VllmFleet, "from_config", staticmethod(from_config))
    monkeypatch.setattr(run_backend, "reset_prefix_caches", lambda urls, external=False: None)
    keeper = FleetKeeper(keep)
    try:
        for refresh in (False, True, True, False):
            cfg = _config(0.0, "round_robin")
            cfg.sim.refresh_on_arrival = refresh
            with _fleet_for(cfg, tmp_path / f"run{len(started)}" / "logs", {}, keeper):
                pass
        plain, refreshed = (
            keeper.events_dir_for(["fleet", {}]),
            keeper.events_dir_for(["fleet", {"A": "1"}]),
        )
        assert plain == keeper.events_dir_for(["fleet", {}]) and plain != refreshed
        assert keeper.events_dir not in (plain, refreshed)
        assert [f.stopped for f in started] == [True] * (starts - keep) + [False] * keep
    finally:
        keeper.close()
    assert len(started) == starts and all(f.stopped for f in started)
    assert not Path(plain).exists() and not Path(refreshed).exists()


def test_a_keeper_keeps_at_least_one_fleet() -> None:
    with pytest.raises(ValueError, match="keep must be >= 1"):
        FleetKeeper(0)


def test_a_batch_keeps_one_fleet_per_distinct_launch() -> None:
    """`akvc run-batch` keeps as many fleets as its real runs launch differently: the
    interleaved tiers batch (HBM only, + host) two, a batch of routers on one fleet one."""
    from agentic_kvc.serve.run_backend import fleets_launched

    base = Path("config/runs/real_cpu_tiers.yaml")
    hbm = [load_config(base, [f"policy.name={p}"]) for p in ("dynamo_kv", "sglang_cache_aware")]
    host = [load_config(base, ["fleet.kv_tiers.host_gib=0.0625", "policy.name=dynamo_kv"])]
    sim = [load_config(base, ["backend=sim", "fleet.kv_tiers.host_gib=1"])]
    assert fleets_launched(hbm) == 1
    assert fleets_launched(hbm + host + hbm) == 2
    assert fleets_launched(hbm + sim) == 1  # a simulated run launches nothing
    assert fleets_launched(sim) == 1  # never 0: a keeper holds at least one
    # GPU fleets share the devices: one at a time, whatever differs between them.
    gpu = [
        load_config(base, ["fleet.hardware=h20", f"fleet.kv_tiers.host_gib={g}"]) for g in (0, 1)
    ]
    assert fleets_launched(gpu) == 1
