"""The tier_view_real benchmark's summary: each view's expected / served host tokens judged
against the pre-registered 0.8-1.2, and a TTFT difference inside the repeats' spread said so."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.analysis.test_bench_summary import summarize, verdict

ARCHIVED = Path(__file__).resolve().parents[2] / "results/archive/bench/tier_view_real.json"


def doc() -> dict[str, Any]:
    return json.loads(ARCHIVED.read_text())


def test_the_archived_run_is_judged_from_its_own_numbers(tmp_path: Path) -> None:
    d = doc()
    rows = summarize(tmp_path, "tier_view_real", d)
    for view, label in (("estimated", "estimated view (--tier-view)"), ("exact", "exact view")):
        ratio = d["per_view"][view]["expected_over_served"]
        want = "met" if 0.8 <= ratio <= 1.2 else "not met"
        assert verdict(rows, f"{label}: host tokens") == want


def test_a_view_outside_the_band_misses_and_a_spread_bound_difference_is_named(
    tmp_path: Path,
) -> None:
    d = copy.deepcopy(doc())
    d["per_view"]["estimated"]["expected_over_served"] = 1.3
    r = d["estimated_vs_exact"]["ttft_p50"]
    r.update(rel_diff=-0.3, ci_low=-0.5, ci_high=-0.1, significant=True, beyond_spread=False)
    rows = summarize(tmp_path, "tier_view_real", d)
    assert verdict(rows, "estimated view (--tier-view): host tokens") == "not met"
    p50 = next(x for x in rows if x.measure.startswith("ttft_p50"))
    assert p50.value.endswith("(within the repeats' spread)")
    d["per_view"]["estimated"]["expected_over_served"] = 1.19
    rows = summarize(tmp_path, "tier_view_real", d)
    assert verdict(rows, "estimated view (--tier-view): host tokens") == "met"
