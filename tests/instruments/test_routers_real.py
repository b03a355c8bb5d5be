"""1 vs 2 real proxies in front of the same vLLM CPU engines (instruments/routers_real.py).

The quick tests need no engines: the replayer's proxy choice is the simulator's replica
choice, the variant order rotates, and the report section renders the bench file or says
"not run". The real run (6 sessions, 16 requests, unified, 1 and 2 proxies, one fleet
start) is marked slow: about 1.5-2 min on the shared 2-core machine. Run it with

    flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock .venv/bin/python -m pytest -m slow \
        tests/instruments/test_routers_real.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_kvc.analysis.studies.base import Section
from agentic_kvc.analysis.studies.routers import real_engines
from agentic_kvc.config import load_config
from agentic_kvc.instruments.routers import run_routers
from agentic_kvc.instruments.routers_real import (
    BASE,
    SpreadReplayer,
    per_request,
    run_bench,
    variants,
)
from agentic_kvc.io import read_jsonl
from agentic_kvc.replay.driver import ReplaySettings
from agentic_kvc.sim.run_backend import profile_for
from agentic_kvc.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]


def _config(sessions: int, policy: str = "unified"):
    return load_config(
        ROOT / BASE, [f"workload.generator.sessions={sessions}", f"policy.name={policy}"]
    )


def test_replayer_sends_each_request_to_the_simulators_replica() -> None:
    config = _config(12)
    workload = load_workload(config.workload, config.seed)
    sim_cfg = config.model_copy(update={"backend": "sim"})
    _r, _s, sim_of = run_routers(sim_cfg, workload, profile_for(sim_cfg), 2, "random")
    settings = ReplaySettings(target="http://a", model="m")
    rep = SpreadReplayer(settings, ["http://a", "http://b"], "random", config.seed, None, 0.0)
    real_of = {req.request_id: rep.target_for(req) for s in workload.sessions for req in s.requests}
    assert {rid: rep.targets[i] for rid, i in sim_of.items()} == real_of
    assert set(real_of.values()) == {"http://a", "http://b"}  # both proxies get requests
    one = SpreadReplayer(settings, ["http://a"], "random", config.seed, None, 0.0)
    assert {one.target_for(r) for s in workload.sessions for r in s.requests} == {"http://a"}


def test_variants_rotate_per_repeat() -> None:
    orders = [variants(["a", "b"], [1, 2], k) for k in range(4)]
    assert all(sorted(o) == sorted(orders[0]) for o in orders)
    assert len({o[0] for o in orders}) == 4  # every variant runs first once


def test_per_request_marks_later_turns_that_moved() -> None:
    def rec(rid: str, turn: int, inst: int, error: str | None = None) -> dict:
        return {
            "request_id": rid,
            "session_id": rid[0],
            "turn": turn,
            "prefill_instance": inst,
            "ttft_s": 0.1,
            "error": error,
        }

    rows = [rec("a0", 0, 0), rec("a1", 1, 0), rec("a2", 2, 1), rec("b0", 0, 1), rec("b1", 1, 1)]
    out = per_request([*rows, rec("c0", 0, 0, "timeout")])
    assert {k: v["moved"] for k, v in out.items()} == {
        "a0": None,
        "a1": 0,
        "a2": 1,
        "b0": None,
        "b1": 0,
    }


def test_section_says_not_run_without_the_bench_file(tmp_path: Path) -> None:
    s = Section("routers", "t", "q")
    real_engines(s, tmp_path / "routers_real.json")
    assert "not run" in s.markdown()
    assert not s.findings


@pytest.mark.vllm
@pytest.mark.slow
def test_two_real_proxies_share_the_fleet(tiny_model, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AKVC_TINY_MODEL", str(tiny_model))
    config = _config(6)  # 16 requests, two sessions of 6 turns
    out = tmp_path / "routers_real.json"
    data = run_bench(config, ["unified"], [1, 2], 1, tmp_path / "runs", out, log=lambda _m: None)
    workload = load_workload(config.workload, config.seed)
    ids = {r.request_id for s in workload.sessions for r in s.requests}
    runs = {run["proxies"]: run for run in data["runs"]}
    assert set(runs) == {1, 2}
    for r, run in runs.items():
        records = list(read_jsonl(Path(run["run_dir"]) / "requests.jsonl"))
        assert {x["request_id"] for x in records} == ids
        assert all(x["error"] is None for x in records), [x["error"] for x in records]
        assert all(0 <= x["cached_tokens"] <= x["input_tokens"] for x in records)
        inp = sum(x["input_tokens"] for x in records)
        assert run["hit_rate"] == pytest.approx(sum(x["cached_tokens"] for x in records) / inp)
        # Each proxy served (and recorded, with its routing decision) exactly its requests.
        for k in range(r):
            sent = {x["request_id"] for x in records if x["proxy"] == k}
            rows = list(read_jsonl(Path(run["run_dir"]) / f"proxy{k}_records.jsonl"))
            assert {row["request_id"] for row in rows} == sent
            assert all(row["prefill_instance"] in (0, 1) for row in rows)
        assert sum(run["requests_per_proxy"]) == len(ids)
    assert min(runs[2]["requests_per_proxy"]) > 0
    # The second variant reused the first one's engines (reset), not a second start.
    second = data["runs"][1]
    assert second["fleet_shared_from"] == str(Path(data["runs"][0]["run_dir"]))
    assert {(x["policy"], x["proxies"]) for x in data["sim"]} == {("unified", 1), ("unified", 2)}
    s = Section("routers", "t", "q")
    real_engines(s, out)
    assert "Real engines" in s.markdown() and len(s.findings) == 1
    assert json.loads(out.read_text())["requests"] == len(ids)
