"""The section's break-even table: measured smallest N per C beside the decider's N."""

from __future__ import annotations

import json
import math
from pathlib import Path

from agentic_kvc.analysis.studies import lifecycle
from tests.lifecycle.test_analysis import _record


def _recs(big_colo_ttft: float) -> list[dict]:
    recs = []
    for c in (0, 512):
        for rep in range(3):
            recs.append(_record(c, 256, rep, 2.0 + 0.01 * rep, 262144, colo_ttft=5.0))
            recs.append(_record(c, 2048, rep, 9.0 + 0.01 * rep, 2097152, colo_ttft=big_colo_ttft))
    return recs


def test_smallest_negative_n_per_c_beside_the_prediction() -> None:
    rows = lifecycle.break_even_rows(_recs(500.0), predicted=1234.4)
    assert [r[0] for r in rows] == ["0", "512"]
    for r in rows:
        assert r[1] == "256 .. 2,048"
        assert r[2].startswith("2,048 (") and "n.s." not in r[2]  # split clearly faster there
        assert r[3] == "1,234"
    assert lifecycle.break_even_rows(_recs(500.0), predicted=math.inf)[0][3] == "never"
    assert lifecycle.break_even_rows(_recs(500.0), predicted=None)[0][3] == "n/a (no fit)"


def test_none_measured_when_the_split_never_wins() -> None:
    rows = lifecycle.break_even_rows(_recs(1.0), predicted=math.inf)
    assert all(r[2] == "none measured" for r in rows)


def test_section_shows_the_table_and_regenerates_identically(tmp_path: Path) -> None:
    for r in _recs(500.0):
        cfg = r["config"]
        name = f"C{cfg['prior_context']}_N{cfg['current_new_tokens']}_O1_rep{cfg['rep']}.json"
        (tmp_path / name).write_text(json.dumps(r))
    md = lifecycle.analyse(tmp_path).markdown()
    assert "Break-even (N, C) line" in md and "| smallest N with PD - colo < 0 |" in md
    assert md == lifecycle.analyse(tmp_path).markdown()
