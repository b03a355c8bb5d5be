"""The tier_store_race_real benchmark's summary: the step order is met only where every row whose
trace shows the waiting request waiting kept exactly what it did not take, and every other row
kept the whole prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MEASURED, NOT_MET
from tests.analysis.test_bench_summary import summarize, verdict

WAITED = "B waited in the engine"
WHOLE = "nothing waiting"


def row(mode: str, a_host: int, tries: int = 0, taken: int = 0) -> dict[str, Any]:
    steps = {"b_failed_tries": tries, "a_taken_unstored_by_b": taken}
    return {"mode": mode, "a_blocks": 90, "a_host": a_host, "steps": steps}


def doc(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"benchmark": "tier_store_race_real", "results": rows}


def test_rows_as_the_step_order_predicts_meet_it(tmp_path: Path) -> None:
    rows = [row("sequential", 90), row("waiting", 38, 900, 52), row("waiting", 90)]
    out = summarize(tmp_path, "tier_store_race_real", doc(rows))
    assert verdict(out, WAITED) == MET
    assert verdict(out, WHOLE) == MET
    late = next(r for r in out if r.measure.startswith("waiting rows where B reached"))
    assert late.value == "1 of 2"


def test_a_waiting_row_that_kept_the_whole_prompt_misses_it(tmp_path: Path) -> None:
    # store at free (the router's model) would keep all 90 where B took 52
    rows = [row("sequential", 90), row("waiting", 90, 900, 52)]
    out = summarize(tmp_path, "tier_store_race_real", doc(rows))
    assert verdict(out, WAITED) == NOT_MET
    rows = [row("sequential", 38), row("waiting", 38, 900, 52)]
    assert verdict(summarize(tmp_path, "tier_store_race_real", doc(rows)), WHOLE) == NOT_MET


def test_rows_without_the_trace_are_not_measured(tmp_path: Path) -> None:
    rows = [{"mode": "waiting", "a_blocks": 90, "a_host": 38}]
    out = summarize(tmp_path, "tier_store_race_real", doc(rows))
    assert [r.verdict for r in out] == [NOT_MEASURED]
