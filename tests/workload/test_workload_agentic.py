"""Agentic DAG workloads: the agentic Mooncake reader, native round trip of the DAG fields,
the generator's subagents and tool-wait tail (off by default: files keep their bytes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentic_kvc.workload.errors import WorkloadFormatError
from agentic_kvc.workload.formats import detect_format, read_workload
from agentic_kvc.workload.formats.native import dumps_native, write_native
from agentic_kvc.workload.generator import synthesize
from agentic_kvc.workload.model import live_dependencies

DAG = Path(__file__).resolve().parents[1] / "data" / "agentic_dag.jsonl"


def test_agentic_mooncake_rows_become_sessions_with_dependencies() -> None:
    assert detect_format(DAG) == "agentic-mooncake"
    w = read_workload(DAG)
    by = {s.session_id: s for s in w.sessions}
    assert [r.request_id for r in by["main"].requests] == ["m0", "m1"]
    assert by["sub-a"].parent_session_id == "main" and by["sub-b"].parent_session_id == "main"
    assert by["solo"].parent_session_id is None
    req = {r.request_id: r for r in w.requests()}
    assert req["a0"].depends_on == ("m0",)  # from m0's `branches`
    assert req["a1"].depends_on == ()  # its own previous turn is implied
    assert req["m1"].depends_on == ("a1", "b0") and req["m1"].think_s == pytest.approx(0.4)
    assert req["m1"].blocks[0].tokens == 64 and w.meta["block_tokens"] == 64
    # shared content: every subagent and the join turn start with the parent's block 1
    assert req["a0"].blocks[0].id == req["m1"].blocks[0].id == 1


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_bad_dependencies_name_line_and_field(tmp_path: Path) -> None:
    row = {"request_id": "x", "input_length": 10, "output_length": 1, "hash_ids": [1]}
    p = _write(tmp_path, [{**row, "wait_for": ["nope"]}])
    with pytest.raises(WorkloadFormatError, match=r"t.jsonl:1: field 'wait_for'.*nope"):
        read_workload(p, "agentic-mooncake")
    cyc = [{**row, "wait_for": ["y"]}, {**row, "request_id": "y", "wait_for": ["x"]}]
    with pytest.raises(WorkloadFormatError, match="cycle"):
        read_workload(_write(tmp_path, cyc), "agentic-mooncake")
    dup = [row, row]
    with pytest.raises(WorkloadFormatError, match=r":2: field 'request_id'.*line 1"):
        read_workload(_write(tmp_path, dup), "agentic-mooncake")
    # A session id that is not a string: named before the dependency check keys by it (it
    # was a TypeError there; found by tests/reliability/test_fuzz_inputs.py).
    bad_sid = [row, {**row, "request_id": "y", "session_id": [None]}]
    with pytest.raises(WorkloadFormatError, match=r":2: field 'session_id'"):
        read_workload(_write(tmp_path, bad_sid), "agentic-mooncake")


def test_native_round_trip_keeps_the_dag(tmp_path: Path) -> None:
    w = read_workload(DAG)
    out = tmp_path / "n.jsonl"
    write_native(w, out)
    back = read_workload(out)
    assert dumps_native(back) == out.read_text()
    assert [s.parent_session_id for s in back.sessions] == [s.parent_session_id for s in w.sessions]
    assert live_dependencies(back) == live_dependencies(w)


def test_generator_subagents_fan_out_and_join() -> None:
    w = synthesize("agentic-subagents", sessions=12, seed=4)
    children = [s for s in w.sessions if s.parent_session_id]
    assert children, "the preset spawns subagents"
    req = {r.request_id: r for r in w.requests()}
    for c in children:
        spawner = req[c.requests[0].depends_on[0]]
        assert spawner.session_id == c.parent_session_id
        assert c.requests[0].blocks[0].id == 0  # the shared system prompt
    joins = [r for r in w.requests() if r.depends_on and not r.session_id.count("-a")]
    assert joins
    for j in joins:  # a join waits for the last turn of each subagent spawned just before
        kids = [s for s in children if s.requests[-1].request_id in j.depends_on]
        assert len(kids) == len(j.depends_on) and all(
            k.parent_session_id == j.session_id for k in kids
        )
        assert j.input_tokens > req[j.parent_id].input_tokens
    think = np.array([r.think_s for r in w.requests() if r.turn and not r.depends_on])
    assert think.max() > 10 * np.median(think)  # the Pareto tail


def test_new_generator_options_are_off_by_default() -> None:
    w = synthesize("agentic-coding", sessions=6, seed=0)
    assert not w.has_dependencies and all(s.parent_session_id is None for s in w.sessions)
    params = w.meta["generator"]["params"]
    assert "subagent_prob" not in params and "tool_wait_tail_prob" not in params
    on = synthesize("agentic-coding", sessions=6, seed=0, params={"tool_wait_tail_prob": 0.5})
    assert on.meta["generator"]["params"]["tool_wait_tail_prob"] == 0.5
    # the tail draws from its own stream: prompts and lengths stay those of the default
    assert {r.request_id: r.blocks for r in on.requests()} == {
        r.request_id: r.blocks for r in w.requests()
    }


def test_mooncake_rows_at_64_token_blocks(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 200, "output_length": 5, "hash_ids": [0, 1, 2, 3]},
        {"timestamp": 1000, "input_length": 300, "output_length": 5, "hash_ids": [0, 1, 2, 3, 4]},
    ]
    w = read_workload(_write(tmp_path, rows), "mooncake-64")
    assert w.meta["block_tokens"] == 64 and w.meta["rows_with_adjusted_blocks"] == 0
    assert len(w.sessions) == 1  # the second row extends the first: one session
    first, second = w.sessions[0].requests
    assert [b.tokens for b in first.blocks] == [64, 64, 64, 8]
    assert second.parent_id == first.request_id and second.think_s == 1.0
