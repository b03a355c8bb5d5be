"""`workload.session_jitter_s`: seeded per-session offsets, so a trace's replicates differ."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.config import GeneratorConfig, RunConfig, WorkloadConfig
from agentic_kvc.workload import (
    Block,
    Request,
    Session,
    Workload,
    apply_transforms,
    load_workload,
    synthesize,
    write_native,
)
from agentic_kvc.workload.load import workload_for
from agentic_kvc.workload.transform import jitter_offset


def _trace(tmp_path: Path) -> WorkloadConfig:
    write_native(synthesize("agentic-coding", 12, seed=3), tmp_path / "w.jsonl")
    return WorkloadConfig(trace=str(tmp_path / "w.jsonl"))


def _times(wl: Workload) -> dict[str, float]:
    return {r.request_id: r.arrival_s for r in wl.requests()}


def test_unset_is_the_trace_as_read_whatever_the_seed(tmp_path: Path) -> None:
    cfg = _trace(tmp_path)
    plain = load_workload(cfg, seed=0)
    assert "transforms" not in plain.meta
    assert load_workload(cfg, seed=7).sessions == plain.sessions
    assert not cfg.uses_seed
    # The run id of a config without the field is the one from before it existed.
    run = RunConfig(workload=cfg)
    assert "session_jitter_s" not in run.canonical()["workload"]
    jittered = RunConfig(workload=cfg.model_copy(update={"session_jitter_s": 1.0}))
    assert jittered.canonical()["workload"]["session_jitter_s"] == 1.0
    assert jittered.run_id() != run.run_id()


def test_same_seed_same_workload_other_seed_other_times(tmp_path: Path) -> None:
    cfg = _trace(tmp_path).model_copy(update={"session_jitter_s": 2.0})
    assert cfg.uses_seed
    a, again, b = (load_workload(cfg, seed=s) for s in (1, 1, 2))
    assert a.sessions == again.sessions
    assert _times(a) != _times(b)
    assert a.meta["transforms"]["session_jitter_s"] == {"jitter_s": 2.0, "seed": 1}


def test_each_session_shifts_whole_by_an_offset_below_j(tmp_path: Path) -> None:
    plain = load_workload(_trace(tmp_path), seed=0)
    j = 2.0
    wl = apply_transforms(plain, session_jitter_s=j, seed=5)
    before = {s.session_id: s for s in plain.sessions}
    offsets = []
    for s in wl.sessions:
        old = before[s.session_id]
        dt = s.requests[0].arrival_s - old.requests[0].arrival_s
        assert 0 <= dt < j and dt == pytest.approx(jitter_offset(5, s.session_id, j))
        offsets.append(dt)
        for r0, r1 in zip(old.requests, s.requests, strict=True):
            assert r1.arrival_s == pytest.approx(r0.arrival_s + dt)  # gaps between turns kept
            assert (r1.think_s, r1.blocks, r1.output_tokens) == (
                r0.think_s,
                r0.blocks,
                r0.output_tokens,
            )
    assert len(set(offsets)) == len(offsets)  # not one shift for all
    starts = [s.start_s for s in wl.sessions]
    assert starts == sorted(starts)  # re-sorted by the new starts


def test_offset_depends_on_seed_and_session_only() -> None:
    def sess(sid: str, t: float) -> Session:
        return Session(sid, [Request(f"{sid}/0", sid, 0, 16, 1, (Block(ord(sid), 16),), t)])

    full = Workload([sess("a", 0.0), sess("b", 1.0), sess("c", 2.0)])
    sub = apply_transforms(full, max_sessions=2, session_jitter_s=3.0, seed=9)
    whole = apply_transforms(full, session_jitter_s=3.0, seed=9)
    assert _times(sub) == {k: v for k, v in _times(whole).items() if k != "c/0"}
    u = [jitter_offset(s, "a", 1.0) for s in range(2000)]
    assert min(u) >= 0 and max(u) < 1 and abs(sum(u) / len(u) - 0.5) < 0.03


def test_a_subagent_moves_with_its_root_session() -> None:
    parent = Session("p", [Request("p/0", "p", 0, 16, 1, (Block(1, 16),), 0.0)])
    child = Session(
        "k", [Request("k/0", "k", 0, 16, 1, (Block(2, 16),), 0.5, depends_on=("p/0",))], "p"
    )
    wl = apply_transforms(Workload([parent, child]), session_jitter_s=10.0, seed=3)
    t = _times(wl)
    assert t["k/0"] - t["p/0"] == pytest.approx(0.5)
    assert t["p/0"] == pytest.approx(jitter_offset(3, "p", 10.0))


def test_negative_jitter_is_refused() -> None:
    with pytest.raises(ValueError, match="session_jitter_s"):
        apply_transforms(Workload([]), session_jitter_s=-1.0)
    with pytest.raises(ValueError, match="session_jitter_s"):
        WorkloadConfig(generator=GeneratorConfig(), session_jitter_s=-1.0)


def test_workload_cache_keeps_the_seeds_apart_when_jittered(tmp_path: Path) -> None:
    cfg = _trace(tmp_path)
    plain = [workload_for(RunConfig(seed=s, workload=cfg)) for s in (0, 1)]
    assert plain[0] is plain[1]  # a trace alone: one cached workload for every seed
    jit = cfg.model_copy(update={"session_jitter_s": 2.0})
    a, b = (workload_for(RunConfig(seed=s, workload=jit)) for s in (0, 1))
    assert _times(a) != _times(b)
    assert _times(a) == _times(load_workload(jit, seed=0))
