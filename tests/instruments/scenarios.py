"""Hand-built workloads and a fixed engine profile for the instruments' tests."""

from __future__ import annotations

import json
from typing import Any

from agentic_kvc.config import RunConfig, load_config
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.profiles.cost import AffineStepCost, EngineProfile
from agentic_kvc.workload.model import Block, Request, Session, Workload

PROFILE = EngineProfile(
    "test",
    "test",
    AffineStepCost(overhead_s=0.004, per_token_s=2e-5, per_attn_pair_s=1e-10, per_kv_token_s=1e-8),
    kv_bytes_per_token=1024,
    kv_capacity_tokens=400_000,
    source="tests/instruments",
)


def cfg(**sets: Any) -> RunConfig:
    base: dict[str, Any] = {
        "backend": "sim",
        "seed": 3,
        "workload": {"generator": {"preset": "agentic-coding", "sessions": 6}},
        "fleet": {"instances": 2, "kv_cache_tokens": 400_000},
    }
    return load_config(base, [f"{k}={v}" for k, v in sets.items()])


def session(
    sid: str,
    turns: list[list[tuple[int, int]]],
    start_s: float = 0.0,
    think_s: float = 1.0,
    output_tokens: int = 16,
) -> Session:
    """A session whose turn k's prompt is the blocks (id, tokens) listed for it."""
    reqs = []
    for k, blocks in enumerate(turns):
        bl = tuple(Block(i, n) for i, n in blocks)
        reqs.append(
            Request(
                f"{sid}-{k}",
                sid,
                k,
                sum(b.tokens for b in bl),
                output_tokens,
                bl,
                arrival_s=start_s if k == 0 else 0.0,
                think_s=0.0 if k == 0 else think_s,
                parent_id=f"{sid}-{k - 1}" if k else None,
            )
        )
    return Session(sid, reqs)


def dumps(records: list[RequestRecord]) -> bytes:
    """The records as requests.jsonl would hold them (sorted as the sim backend writes)."""
    rows = sorted(records, key=lambda r: (r.arrival_s, r.session_id, r.turn))
    return "\n".join(json.dumps(r.to_dict(), sort_keys=True) for r in rows).encode()


def two_turns(prefix_tokens: int = 8000) -> Workload:
    """One session: a long prompt, a pause, then the same prompt extended by a little."""
    head = [(i, 100) for i in range(prefix_tokens // 100)]
    return Workload([session("s", [head, [*head, (9999, 200)]])])
