"""The tier_store_timing_real benchmark's summary: the simulator's store-at-eviction is met only
when the host tier held all of the prompt once HBM had evicted it, judged from the file's steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MEASURED, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict

HELD = "a 46-block prompt's blocks in the host tier once HBM evicted it"


def doc(host_after: int | None, walk: int, ahead: str | None) -> dict[str, Any]:
    shape = "all" if host_after == 46 else "suffix"
    steps = [{"step": "A done", "a_host": host_after or 0, "a_hbm": 46, "a_host_shape": shape}]
    if host_after is not None:
        steps.append({"step": "fill2", "a_host": host_after, "a_hbm": 0, "a_host_shape": shape})
    return {
        "benchmark": "tier_store_timing_real",
        "prompt_blocks": 46,
        "engine": {
            "block_size": 32,
            "kv_cache_tokens": 129 * 32,
            "max_num_batched_tokens": walk * 16,
            "lazy_walk_blocks": walk,
        },
        "steps": steps,
        "a_host_after_eviction": host_after,
        "stored_ahead_of_eviction_at": ahead,
        "vllm": "0.32.0",
        "processor": "some CPU",
    }


def test_a_short_walk_misses_the_simulators_model(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tier_store_timing_real", doc(4, 4, None))
    assert verdict(rows, HELD) == NOT_MET
    held = next(r for r in rows if r.measure.startswith(HELD))
    assert held.value == "4 of 46 (a suffix)"
    engine = next(r for r in rows if r.measure == "engine")
    assert engine.value.startswith("lazy walk 4 blocks per step over 129 HBM blocks")


def test_a_walk_over_the_whole_pool_meets_it(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tier_store_timing_real", doc(46, 512, "A done"))
    assert verdict(rows, HELD) == MET
    ahead = next(r for r in rows if r.measure.startswith("stored while HBM"))
    assert ahead.value == "yes, at A done"


def test_a_prompt_hbm_never_evicted_is_not_measured(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tier_store_timing_real", doc(None, 4, None))
    assert verdict(rows, HELD) == NOT_MEASURED
