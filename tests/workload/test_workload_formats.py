"""Trace readers: public samples, hand-made rows with known answers, and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.workload import WorkloadFormatError, detect_format, read_workload
from agentic_kvc.workload.stats import workload_stats


def _mooncake_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mooncake_acceptance_numbers(shared_traces: Path) -> None:
    wl = read_workload(shared_traces / "mooncake_conversation_trace.jsonl")
    s = workload_stats(wl)
    assert s["requests"] == 12_031
    assert s["input_tokens"]["p50"] == 6_909
    assert s["input_tokens"]["p90"] == 27_367
    assert s["prefix_hit_share_of_input_tokens"] == pytest.approx(0.374, abs=0.002)
    assert s["continuation_share"] == pytest.approx(0.387, abs=0.002)
    # Every session is a chain: turn i+1's parent is turn i, and arrivals increase.
    for sess in wl.sessions:
        for prev, cur in zip(sess.requests, sess.requests[1:], strict=False):
            assert cur.parent_id == prev.request_id
            assert cur.arrival_s >= prev.arrival_s
            assert cur.think_s == pytest.approx(cur.arrival_s - prev.arrival_s)


def test_mooncake_rebuild_picks_longest_chain_and_forks(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [0, 1, 2]},
        {"timestamp": 1000, "input_length": 1000, "output_length": 5, "hash_ids": [0, 7]},
        # shares [0, 1] with row 1 only: continues it (row 2 shares just the system block)
        {"timestamp": 2000, "input_length": 2000, "output_length": 5, "hash_ids": [0, 1, 3, 4]},
        # shares [0, 1, 3] with row 3 and [0, 1] with row 1: the longer match wins
        {"timestamp": 3000, "input_length": 2048, "output_length": 5, "hash_ids": [0, 1, 3, 5]},
        # continues row 1 again although row 3 already did: a fork, a new session
        {"timestamp": 4000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 9]},
    ]
    wl = read_workload(_mooncake_rows(tmp_path / "t.jsonl", rows))
    by_id = {r.request_id: r for r in wl.requests()}
    assert by_id["r1"].parent_id is None and by_id["r2"].parent_id is None
    assert by_id["r3"].parent_id == "r1"
    assert by_id["r4"].parent_id == "r3"
    assert by_id["r5"].parent_id == "r1"
    assert by_id["r4"].think_s == pytest.approx(1.0)
    assert by_id["r3"].session_id == by_id["r1"].session_id == by_id["r4"].session_id
    assert by_id["r5"].session_id not in {by_id["r1"].session_id, by_id["r2"].session_id}
    assert [r.turn for r in wl.sessions[0].requests] == [0, 1, 2]
    assert wl.meta["forks"] == 1
    # The partial last block holds the remainder of the prompt.
    assert [b.tokens for b in by_id["r4"].blocks] == [512, 512, 512, 512]
    assert [b.tokens for b in by_id["r1"].blocks] == [512, 512, 476]


@settings(max_examples=25, deadline=None)
@given(
    n_rows=st.integers(1, 8),
    bad_at=st.integers(0, 7),
    bad=st.sampled_from(
        [
            ("{not json", None),
            (
                '{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": [0]}',
                "input_length",
            ),
            ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "hash_ids"),
            (
                '{"timestamp": 0, "input_length": 5, "output_length": "x", "hash_ids": [0]}',
                "output_length",
            ),
            (
                '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0, "a"]}',
                "hash_ids",
            ),
        ]
    ),
)
def test_malformed_mooncake_line_is_named(
    tmp_path_factory: pytest.TempPathFactory, n_rows: int, bad_at: int, bad: tuple[str, str | None]
) -> None:
    good = '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}'
    lines = [good] * n_rows
    at = min(bad_at, n_rows)
    lines.insert(at, bad[0])
    path = tmp_path_factory.mktemp("bad") / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(WorkloadFormatError) as err:
        read_workload(path, "mooncake")
    assert err.value.line == at + 1
    assert f"{path}:{at + 1}:" in str(err.value)
    if bad[1] is not None:
        assert err.value.field == bad[1]
        assert repr(bad[1]) in str(err.value)


def test_tracelab_csv_sample(shared_traces: Path) -> None:
    wl = read_workload(shared_traces / "tracelab_multi_session_sample.csv")
    assert wl.meta["format"] == "tracelab"
    assert len(wl) == 303 and len(wl.sessions) == 48
    s0 = next(s for s in wl.sessions if s.session_id == "0")
    # prefix_len + input_len on every round; each round's prefix is the previous context.
    assert [r.input_tokens for r in s0.requests] == [2318, 2518 + 348, 2997 + 812]
    assert [r.think_s for r in s0.requests] == [0.0, 0.3, 0.154]
    assert s0.requests[0].arrival_s == pytest.approx(0.117)
    r1, r2 = s0.requests[1], s0.requests[2]
    assert r2.blocks[: len(r1.blocks)] == r1.blocks


def test_tracelab_rounds_sample(shared_traces: Path) -> None:
    wl = read_workload(shared_traces / "tracelab_round_trace_sample.jsonl")
    assert wl.meta["format"] == "tracelab-rounds"
    assert len(wl.sessions) == 2
    for sess in wl.sessions:
        for r in sess.requests:
            assert r.think_s >= 0
        assert [r.turn for r in sess.requests] == list(range(len(sess.requests)))


def test_tracelab_csv_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len\n0,1,0,0,5,5\n"
    )
    with pytest.raises(WorkloadFormatError, match="tool_wait_after_ms"):
        read_workload(path, "tracelab")


def test_tracelab_csv_bad_value_names_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    header = "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms"
    path.write_text(f"{header}\n0,1,0,0,5,5,0\n0,1,1,10,abc,5,0\n")
    with pytest.raises(WorkloadFormatError) as err:
        read_workload(path)
    assert err.value.line == 3 and err.value.field == "input_len"


def test_bailian_parent_links(tmp_path: Path) -> None:
    rows = [
        {
            "chat_id": 5,
            "parent_chat_id": -1,
            "timestamp": 10.0,
            "input_length": 40,
            "output_length": 7,
            "type": "text",
            "turn": 1,
            "hash_ids": [11, 12, 13],
        },
        {
            "chat_id": 9,
            "parent_chat_id": 5,
            "timestamp": 12.5,
            "input_length": 70,
            "output_length": 7,
            "type": "text",
            "turn": 2,
            "hash_ids": [11, 12, 14, 15, 16],
        },
        {
            "chat_id": 3,
            "parent_chat_id": 77,
            "timestamp": 11.0,
            "input_length": 16,
            "output_length": 1,
            "type": "search",
            "turn": 4,
            "hash_ids": [99],
        },
    ]
    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert detect_format(path) == "bailian"
    wl = read_workload(path)
    by_id = {r.request_id: r for r in wl.requests()}
    assert by_id["9"].parent_id == "5" and by_id["9"].session_id == by_id["5"].session_id
    assert by_id["9"].think_s == pytest.approx(2.5) and by_id["9"].turn == 1
    assert by_id["3"].parent_id is None and wl.meta["missing_parents"] == 1
    assert [b.tokens for b in by_id["5"].blocks] == [16, 16, 8]
    assert by_id["5"].arrival_s == 0.0


def test_azure_csv(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.1805900,396,109\n"
    )
    assert detect_format(path) == "azure"
    wl = read_workload(path)
    reqs = wl.requests()
    assert [r.input_tokens for r in reqs] == [374, 396]
    assert reqs[1].arrival_s == pytest.approx(3.5)
    assert len(wl.sessions) == 2 and reqs[0].blocks[0].id != reqs[1].blocks[0].id
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,374,44\n")
    with pytest.raises(WorkloadFormatError) as err:
        read_workload(path)
    assert err.value.line == 2 and err.value.field == "TIMESTAMP"


def test_unknown_format_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"foo": 1}\n')
    with pytest.raises(WorkloadFormatError, match="cannot tell the format"):
        read_workload(path)
    with pytest.raises(WorkloadFormatError, match="no such file"):
        read_workload(tmp_path / "missing.jsonl")
