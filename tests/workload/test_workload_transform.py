"""Subsetting and scaling, and `load_workload` (the entry point runs use)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.config import GeneratorConfig, WorkloadConfig
from agentic_kvc.workload import (
    Block,
    Request,
    Session,
    Workload,
    WorkloadFormatError,
    apply_transforms,
    engine_block_hashes,
    load_workload,
    synthesize,
    write_native,
)
from agentic_kvc.workload import load as load_mod
from agentic_kvc.workload.stats import unlimited_cache_hits


def _block_lcp(a: Request, b: Request) -> int:
    n = 0
    for x, y in zip(a.blocks, b.blocks, strict=False):
        if x.id != y.id:
            break
        n += 1
    return n


def test_token_scale_keeps_which_blocks_are_shared() -> None:
    wl = synthesize("agentic-coding", sessions=12, seed=2)
    small = apply_transforms(wl, token_scale=0.05)
    before, after = wl.requests(), small.requests()
    assert [r.request_id for r in before] == [r.request_id for r in after]
    for r0, r1 in zip(before, after, strict=True):
        assert [b.id for b in r0.blocks] == [b.id for b in r1.blocks]
        assert all(b.tokens >= 1 for b in r1.blocks)
        assert r1.input_tokens == sum(b.tokens for b in r1.blocks) < r0.input_tokens
    # One size per (block id, original size); shared leading blocks stay shared.
    sizes: dict[tuple[int, int], int] = {}
    for r0, r1 in zip(before, after, strict=True):
        for b0, b1 in zip(r0.blocks, r1.blocks, strict=True):
            assert sizes.setdefault((b0.id, b0.tokens), b1.tokens) == b1.tokens
    for i in range(0, len(before), 3):
        for k in range(i + 1, len(before), 5):
            assert _block_lcp(before[i], before[k]) == _block_lcp(after[i], after[k])
    # Hit fractions with an unlimited cache barely move (rounding of small blocks only).
    h0 = sum(unlimited_cache_hits(before)) / sum(r.input_tokens for r in before)
    h1 = sum(unlimited_cache_hits(after)) / sum(r.input_tokens for r in after)
    assert h1 == pytest.approx(h0, abs=0.02)
    assert small.meta["transforms"]["token_scale"] == 0.05


def test_token_scale_keeps_a_partial_block_a_prefix() -> None:
    full = Request("a", "s", 0, 1024, 1, (Block(1, 512), Block(2, 512)))
    part = Request("b", "t", 0, 612, 1, (Block(1, 512), Block(2, 100)))
    wl = apply_transforms(Workload([Session("s", [full]), Session("t", [part])]), token_scale=0.1)
    f, p = wl.sessions[0].requests[0], wl.sessions[1].requests[0]
    assert p.blocks[1].tokens <= f.blocks[1].tokens
    hf, hp = engine_block_hashes(f, 4), engine_block_hashes(p, 4)
    assert hp == hf[: len(hp)]


def _chain(sid: str, n: int, start: float, sizes: list[int]) -> Session:
    reqs = []
    blocks: tuple[Block, ...] = ()
    for t in range(n):
        blocks = (*blocks, Block(hash((sid, t)) & 0xFFFF, sizes[t]))
        reqs.append(
            Request(
                f"{sid}/{t}",
                sid,
                t,
                sum(b.tokens for b in blocks),
                10,
                blocks,
                arrival_s=start + 10 * t,
                think_s=2.0,
                parent_id=reqs[-1].request_id if reqs else None,
            )
        )
    return Session(sid, reqs)


def _toy() -> Workload:
    return Workload(
        [
            _chain("a", 3, 0.0, [100, 100, 100]),
            _chain("b", 2, 5.0, [50, 900]),
            _chain("c", 1, 7.0, [10]),
        ]
    )


def test_window_sessions_and_requests() -> None:
    wl = apply_transforms(_toy(), window_s=(5.0, 20.0))
    got = {r.request_id: r.arrival_s for r in wl.requests()}
    assert got == {"b/0": 0.0, "c/0": 2.0, "a/1": 5.0, "b/1": 10.0}
    wl = apply_transforms(_toy(), max_sessions=2)
    assert [s.session_id for s in wl.sessions] == ["a", "b"]
    wl = apply_transforms(_toy(), max_requests=3)
    assert [r.request_id for r in wl.requests()] == ["a/0", "b/0", "c/0"]
    assert wl.meta["transforms"]["requests_before"] == 6


def test_max_input_tokens_drop_and_truncate() -> None:
    wl = apply_transforms(_toy(), max_input_tokens=250)
    ids = [r.request_id for r in wl.requests()]
    assert ids == ["a/0", "b/0", "c/0", "a/1"]  # a/2 (300) dropped; b/1 (950) ends session b
    info = wl.meta["transforms"]["max_input_tokens"]
    assert info["policy"] == "drop_rest_of_session" and sorted(info["affected_ids"]) == [
        "a/2",
        "b/1",
    ]
    wl = apply_transforms(_toy(), max_input_tokens=250, overflow="truncate")
    by_id = {r.request_id: r for r in wl.requests()}
    assert len(by_id) == 6 and by_id["b/1"].input_tokens == 250
    assert [b.tokens for b in by_id["b/1"].blocks] == [50, 200]


def test_settings_that_leave_no_request_are_refused_naming_them() -> None:
    # A run of nothing would complete with empty records (found with a chat replay whose
    # token_scale, raised to fit, sent every prompt past max_input_tokens).
    shortest = min(s.requests[0].input_tokens for s in _toy().sessions)
    with pytest.raises(ValueError, match=f"max_input_tokens=9 .* shortest has {shortest} "):
        apply_transforms(_toy(), max_input_tokens=shortest - 1)
    with pytest.raises(ValueError, match=r"at token_scale 0\.5"):
        apply_transforms(_toy(), token_scale=0.5, max_input_tokens=1)
    with pytest.raises(ValueError, match="window_s leave no request of 6"):
        apply_transforms(_toy(), window_s=(1000.0, 2000.0))
    assert len(apply_transforms(_toy(), max_input_tokens=shortest).requests()) > 0
    assert len(apply_transforms(Workload([]), max_input_tokens=1).requests()) == 0  # was empty


def test_rate_and_time_scale() -> None:
    wl = apply_transforms(_toy(), rate_scale=2.0)
    r = {x.request_id: x for x in wl.requests()}
    assert r["a/2"].arrival_s == 10.0 and r["a/2"].think_s == 2.0
    wl = apply_transforms(_toy(), time_scale=0.5)
    r = {x.request_id: x for x in wl.requests()}
    assert r["a/2"].arrival_s == 10.0 and r["a/2"].think_s == 1.0
    with pytest.raises(ValueError, match="window_s"):
        apply_transforms(_toy(), window_s=(5.0, 5.0))


def test_load_workload_generator_and_trace(tmp_path: Path) -> None:
    cfg = WorkloadConfig(generator=GeneratorConfig(preset="chat", sessions=6), token_scale=0.5)
    wl = load_workload(cfg, seed=4)
    assert len(wl.sessions) == 6 and wl.meta["seed"] == 4
    assert wl.meta["generator"]["preset"] == "chat"
    again = load_workload(cfg, seed=4)
    assert again.sessions == wl.sessions
    write_native(synthesize("agentic-coding", 8, seed=1), tmp_path / "w.jsonl")
    cfg = WorkloadConfig(trace="w.jsonl", max_sessions=3, time_scale=0.1)
    wl = load_workload(cfg, seed=0, base_dir=tmp_path)
    assert len(wl.sessions) == 3 and wl.meta["transforms"]["time_scale"] == 0.1
    with pytest.raises(WorkloadFormatError, match=r"workload\.trace"):
        load_workload(WorkloadConfig(trace="missing.jsonl"), seed=0, base_dir=tmp_path)
    bad = WorkloadConfig(generator=GeneratorConfig(params={"bogus": 1}))
    with pytest.raises(ValueError, match=r"workload.generator.*params.bogus"):
        load_workload(bad, seed=0)


def test_load_public_trace_scaled_for_a_small_model(shared_traces: Path) -> None:
    cfg = WorkloadConfig(
        trace=str(shared_traces / "mooncake_conversation_trace.jsonl"),
        max_sessions=50,
        token_scale=0.03,
        max_input_tokens=3000,
    )
    wl = load_workload(cfg, seed=0)
    assert 0 < len(wl.sessions) <= 50
    assert all(r.input_tokens <= 3000 for r in wl.requests())


def test_a_trace_is_parsed_once_and_reread_when_it_changes(tmp_path: Path) -> None:
    """`load_workload` keeps a parsed trace for the process (a batch replays one trace many
    times); each call still gets its own workload, and a changed file is read again."""
    path = tmp_path / "w.jsonl"
    write_native(synthesize("agentic-coding", 8, seed=1), path)
    cfg = WorkloadConfig(trace=str(path), max_sessions=3)
    reads = load_mod._read_trace.cache_info().misses
    a = load_workload(cfg, seed=0)
    b = load_workload(cfg.model_copy(update={"max_sessions": 5}), seed=1)
    assert load_mod._read_trace.cache_info().misses == reads + 1
    assert len(a.sessions) == 3 and len(b.sessions) == 5
    assert a.meta is not b.meta and a.meta["seed"] == 0 and b.meta["seed"] == 1
    write_native(synthesize("agentic-coding", 4, seed=2), path)  # another size: read again
    c = load_workload(WorkloadConfig(trace=str(path)), seed=0)
    assert load_mod._read_trace.cache_info().misses == reads + 2
    assert len(c.sessions) == 4
