"""The hit-rate ceiling: an infinite cache of whole engine blocks, never the last prompt token."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_kvc.config import load_config
from agentic_kvc.io import dumps_canonical
from agentic_kvc.metrics.summary import summarize
from agentic_kvc.sim.run_backend import prepare_sim, profile_for
from agentic_kvc.workload import (
    Block,
    Request,
    Session,
    Workload,
    block_ceiling_hits,
    hit_rate_ceiling,
    hit_rate_ceiling_for,
    workload_for,
)

ROOT = Path(__file__).resolve().parents[2]


def _req(rid: str, blocks: list[tuple[int, int]], t: float) -> Request:
    bl = tuple(Block(i, n) for i, n in blocks)
    return Request(rid, rid, 0, sum(b.tokens for b in bl), 1, bl, arrival_s=t)


def _tiny() -> Workload:
    # a: cold. b: extends a (100 shared tokens). c: the same prompt as b (all 150 shared, but
    # the last token is always computed). d: the first 32 tokens of block 0 (a true prefix).
    reqs = [
        _req("a", [(0, 100)], 0.0),
        _req("b", [(0, 100), (1, 50)], 1.0),
        _req("c", [(0, 100), (1, 50)], 2.0),
        _req("d", [(0, 32)], 3.0),
    ]
    return Workload([Session(r.session_id, [r]) for r in reqs])


@pytest.mark.parametrize(
    ("block_size", "expected"),
    [
        # b: floor(100/16)=6 blocks; c: 150 shared but at most (150-1)//16=9 blocks;
        # d: 32 shared but at most (32-1)//16=1 block.
        (16, [0, 96, 144, 16]),
        # token blocks: the whole shared prefix, minus the last prompt token when all is shared
        (1, [0, 100, 149, 31]),
        # blocks bigger than a shared run: nothing can hit
        (128, [0, 0, 128, 0]),
    ],
)
def test_ceiling_counts_whole_blocks_and_leaves_the_last_token(
    block_size: int, expected: list[int]
) -> None:
    wl = _tiny()
    assert block_ceiling_hits(wl.requests(), block_size) == expected
    assert hit_rate_ceiling(wl, block_size) == pytest.approx(sum(expected) / 432)


def test_ceiling_falls_with_block_size_and_errors_name_the_field() -> None:
    from agentic_kvc.workload import synthesize

    wl = synthesize("agentic-coding", sessions=30, seed=2)
    rates = [hit_rate_ceiling(wl, bs) for bs in (1, 16, 512)]
    assert rates[0] >= rates[1] >= rates[2] > 0
    assert hit_rate_ceiling([], 16) == 0.0
    with pytest.raises(ValueError, match="block_size"):
        block_ceiling_hits(wl.requests(), 0)


def test_a_simulated_run_never_beats_its_ceiling() -> None:
    """Per request and overall, the engine's measured hit is at most the ceiling."""
    cfg = load_config(ROOT / "config/runs/sim_agentic.yaml", ["workload.generator.sessions=8"])
    records = prepare_sim(cfg)(profile_for(cfg))
    ceiling = dict(
        zip(
            (r.request_id for r in workload_for(cfg).requests()),
            block_ceiling_hits(workload_for(cfg).requests(), cfg.fleet.block_size),
            strict=True,
        )
    )
    assert all(r["cached_tokens"] <= ceiling[r["request_id"]] for r in records)
    measured = summarize(records)["overall"]["prefix_hit_rate"]
    assert 0 < measured <= hit_rate_ceiling_for(cfg)


def test_workload_for_accepts_a_run_config_dict_and_run_dir_and_caches(tmp_path: Path) -> None:
    cfg = load_config(ROOT / "config/runs/sim_agentic.yaml", ["seed=3"])
    (tmp_path / "config.json").write_text(dumps_canonical(cfg.canonical()))
    wl = workload_for(cfg)
    assert workload_for(cfg.canonical()) is wl
    assert workload_for(tmp_path) is wl
    # the policy does not change the workload; the seed of a generated one does
    other_policy = load_config(
        ROOT / "config/runs/sim_agentic.yaml", ["seed=3", "policy.name=lmetric"]
    )
    assert workload_for(other_policy) is wl
    assert workload_for(load_config(ROOT / "config/runs/sim_agentic.yaml", ["seed=4"])) is not wl
    assert hit_rate_ceiling_for(cfg) == pytest.approx(hit_rate_ceiling(wl, cfg.fleet.block_size))
