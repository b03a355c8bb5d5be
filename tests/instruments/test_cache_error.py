"""Cache-view error: the exact view never errs in the simulator; an eviction during a tool
pause makes the estimated view claim a hit the engine no longer has."""

from __future__ import annotations

import pytest

from agentic_kvc.instruments.cache_error import errors, record_rows, run_cache_error, summarize
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload
from agentic_kvc.workload.model import Workload

from .scenarios import PROFILE, cfg, dumps, session


def _pause_scenario() -> Workload:
    """One instance of 100 blocks (1600 tokens). Session a prefills 40 blocks, then pauses 5 s;
    meanwhile session b's 40-block prompt and 600 generated tokens need more blocks than are
    free, so the engine reuses a's cached tail. The estimate (80 of 100 blocks recorded) never
    sees the generated blocks and still believes a's prefix is whole."""
    a_head = [(i, 64) for i in range(10)]  # 640 tokens
    b_head = [(100 + i, 64) for i in range(10)]
    a = session("a", [a_head, [*a_head, (50, 64)]], think_s=5.0, output_tokens=8)
    b = session("b", [b_head], start_s=0.5, output_tokens=600)
    return Workload([a, b])


@pytest.mark.parametrize("run_view", ["estimated", "exact"])
def test_an_eviction_during_a_pause_is_a_false_hit_of_the_estimate(run_view: str) -> None:
    config = cfg(
        **{
            "policy.name": "lmetric",
            "policy.cache_view": run_view,
            "fleet.instances": 1,
            "fleet.kv_cache_tokens": 1600,
        }
    )
    records, rows = run_cache_error(config, _pause_scenario(), PROFILE)
    (row,) = [r for r in rows if r["request_id"] == "a-1"]
    assert row["idle_gap_s"] == pytest.approx(5.0)
    assert row["true_cached_tokens"][0] < 640  # the tail went to b's generated tokens
    assert row["predicted"]["estimated"] == [640]
    ((false_hit, missed),) = errors(row, "estimated")
    assert false_hit == 640 - row["true_cached_tokens"][0] > 0 and missed == 0
    assert errors(row, "exact") == [(0, 0)]
    # The engine reused exactly what the truth said at the decision.
    (a1,) = [r for r in records if r.request_id == "a-1"]
    assert a1.cached_tokens == row["true_cached_tokens"][0]


@pytest.mark.parametrize("policy", ["lmetric", "round_robin"])
def test_exact_view_has_zero_error_and_the_run_is_unchanged(policy: str) -> None:
    # A small KV cache: evictions happen all the time.
    config = cfg(**{"policy.name": policy, "fleet.kv_cache_tokens": 60_000})
    workload = load_workload(config.workload, config.seed)
    plain = SimFleet(config, workload, PROFILE)
    plain.run()
    records, rows = run_cache_error(config, workload, PROFILE)
    assert dumps(records) == dumps(plain.records)
    assert rows and all(errors(r, "exact") == [(0, 0)] * 2 for r in rows)
    est = [e for r in rows for e in errors(r, "estimated")]
    assert any(f > 0 for f, _m in est)  # the estimate does err under this pressure
    table = summarize(rows)
    assert {t["view"] for t in table} == {"estimated", "exact"}
    assert all(t["false_hit_tokens"] == 0 for t in table if t["view"] == "exact")
    by_kv = summarize(rows, by="kv_usage")
    assert sum(t["pairs"] for t in by_kv if t["view"] == "exact") == 2 * len(rows)


def test_record_rows_compare_prediction_with_what_the_engine_reported() -> None:
    config = cfg(**{"policy.name": "lmetric", "fleet.kv_cache_tokens": 60_000})
    plain = SimFleet(config, load_workload(config.workload, config.seed), PROFILE)
    plain.run()
    rows = record_rows([r.to_dict() for r in plain.records])
    assert len(rows) == sum(1 for r in plain.records if not r.error)
    by_id = {r.request_id: r for r in plain.records}
    for row in rows:
        ((f, m),) = errors(row, "estimated")
        rec = by_id[row["request_id"]]
        assert f - m == rec.predicted_cached_tokens - rec.cached_tokens
