"""The tier_recency_real benchmark's summary: the reading holds when the loaded prompt kept a
suffix and the never-loaded one a prefix, each judged from the file's own shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MEASURED, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict

LOADED = "a prompt loaded from the host tier"
NEVER = "a prompt never loaded"


def doc(a_shape: str | None, b_shape: str) -> dict[str, Any]:
    return {
        "benchmark": "tier_recency_real",
        "prompt_blocks": 93,
        "loaded_prompt_A": None
        if a_shape is None
        else {"step": "flood10", "kept": 72, "shape": a_shape},
        "never_loaded_prompt_B": {"step": "flood1", "kept": 72, "shape": b_shape},
        "reading_holds": True,  # stale on purpose: the summary judges the shapes
        "vllm": "0.32.0",
        "processor": "some CPU",
    }


def test_a_suffix_and_a_prefix_meet_the_reading(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tier_recency_real", doc("suffix", "prefix"))
    assert verdict(rows, LOADED) == MET
    assert verdict(rows, NEVER) == MET
    loaded = next(r for r in rows if r.measure.startswith(LOADED))
    assert loaded.value == "a suffix: 72 of 93 blocks (after flood10)"


def test_the_other_order_misses_it(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tier_recency_real", doc("prefix", "prefix"))
    assert verdict(rows, LOADED) == NOT_MET
    assert verdict(rows, NEVER) == MET


def test_a_prompt_never_partly_evicted_is_not_measured(tmp_path: Path) -> None:
    rows = summarize(tmp_path, "tier_recency_real", doc(None, "prefix"))
    assert verdict(rows, LOADED) == NOT_MEASURED
