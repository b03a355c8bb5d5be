"""The prefix cache replayed over hash-id traces (the kvcache-simulator cross-check)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentic_kvc.sim.lru_check import lru_hit_rate, read_hash_trace

REPO = Path(__file__).resolve().parents[2]
PEER = REPO / ".venv-peers" / "bin" / "kvcache-simulator"


def write(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_hits_by_hand_with_lru_eviction(tmp_path: Path) -> None:
    rows = [
        {"hash_ids": [1, 2], "input_length": 20},  # blocks of 10 tokens
        {"hash_ids": [1, 3], "input_length": 15},  # hits block 1 (10 tokens); last block 5
        {"hash_ids": [4], "input_length": 10},  # evicts the least recently freed: [1, 2]'s tail
        {"hash_ids": [1, 2], "input_length": 20},  # 1 still cached (touched later), 2 evicted
    ]
    trace = read_hash_trace(write(tmp_path, rows), 10)
    assert trace.tokens == [[10, 10], [10, 5], [10], [10, 10]]
    got = lru_hit_rate(trace, capacity_blocks=3, warmup_fraction=0.0)
    assert got["hit_tokens"] == 0 + 10 + 0 + 10
    assert got["total_tokens"] == 20 + 15 + 10 + 20


def test_same_id_under_different_parents_is_a_different_block(tmp_path: Path) -> None:
    trace = read_hash_trace(
        write(
            tmp_path,
            [{"hash_ids": [1, 2], "input_length": 4}, {"hash_ids": [3, 2], "input_length": 4}],
        ),
        2,
    )
    got = lru_hit_rate(trace, capacity_blocks=8, warmup_fraction=0.0)
    assert got["hit_tokens"] == 0


def test_bad_record_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"hash_ids": [1], "input_length": 3}\n{"input_length": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a hash-id trace record"):
        read_hash_trace(path, 16)


@pytest.mark.slow
@pytest.mark.skipif(not PEER.is_file(), reason="kvcache-simulator not installed (make peers)")
def test_matches_kvcache_simulator_on_the_mooncake_trace_head(
    shared_traces: Path, tmp_path: Path
) -> None:
    head = tmp_path / "head.jsonl"
    with (shared_traces / "mooncake_conversation_trace.jsonl").open() as fh:
        head.write_text("".join(next(fh) for _ in range(3000)))
    out = tmp_path / "kvs.json"
    subprocess.run(
        [
            str(PEER),
            "run",
            "--trace",
            str(head),
            "--model",
            "llama-3.1-8b",
            "--block-size",
            "512",
            "--budgets-gib",
            "64,256",
            "--policies",
            "lru",
            "--format",
            "json",
            "--no-progress",
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    points = json.loads(out.read_text())["points"]
    assert points
    trace = read_hash_trace(head, 512)
    for p in points:
        ours = lru_hit_rate(trace, p["cacheBlocks"])
        assert abs(ours["hit_rate"] - p["results"]["lru"]["hitRate"]) < 0.01
