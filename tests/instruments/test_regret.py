"""Counterfactual regret: a decision that leaves an idle instance holding the whole prefix
has positive regret; taking it has none; forking never changes the run's own records."""

from __future__ import annotations

import pytest

from agentic_kvc.instruments.regret import RegretSettings, run_regret, summarize_regret
from agentic_kvc.sim.fleet import SimFleet
from agentic_kvc.workload import load_workload

from .scenarios import PROFILE, cfg, dumps, two_turns


def _second_turn(policy: str) -> dict:
    config = cfg(**{"policy.name": policy})
    _records, rows = run_regret(config, two_turns(), PROFILE, RegretSettings(every=1))
    (row,) = [r for r in rows if r["turn"] == 1]
    return row


def test_leaving_the_instance_that_holds_the_prefix_has_positive_regret() -> None:
    row = _second_turn("round_robin")
    assert row["placements"]["policy"] == [1, 1]  # round robin moves on to the cold instance
    assert row["placements"]["best_cache"] == row["placements"]["affinity"] == [0, 0]
    assert row["true_cached_tokens"][0] >= 7900 and row["true_cached_tokens"][1] == 0
    assert row["best_ttft_s"] in ("affinity", "best_cache")
    assert row["regret_ttft_s"] > 0.05
    assert row["regret_e2e_s"] > 0
    own, best = row["outcomes"]["policy"], row["outcomes"]["best_cache"]
    assert own["cached_tokens"] == 0 and best["cached_tokens"] >= 7900


def test_taking_the_cached_instance_has_zero_regret() -> None:
    row = _second_turn("lmetric")
    assert row["placements"]["policy"] == [0, 0]
    assert row["regret_ttft_s"] == 0
    assert row["best_ttft_s"] == "policy"


@pytest.mark.parametrize("policy", ["lmetric", "unified", "round_robin"])
def test_forking_leaves_the_run_byte_identical(policy: str) -> None:
    config = cfg(**{"policy.name": policy})
    workload = load_workload(config.workload, config.seed)
    plain = SimFleet(config, workload, PROFILE)
    plain.run()
    records, rows = run_regret(config, workload, PROFILE, RegretSettings(every=7))
    assert rows
    assert dumps(records) == dumps(plain.records)
    # The policy's own fork replays the run: its request ends as it did in the run.
    by_id = {r.request_id: r for r in plain.records}
    for row in rows:
        own = row["outcomes"]["policy"]
        assert own["ttft_s"] == pytest.approx(by_id[row["request_id"]].ttft_s, abs=1e-12)
        assert own["e2e_s"] == pytest.approx(by_id[row["request_id"]].e2e_s, abs=1e-12)
        assert all(row[f"regret_{m}"] >= 0 for m in ("ttft_s", "e2e_s", "fleet_ttft_s"))
    groups = summarize_regret(rows)
    assert any(g.route_class == "all" and g.n == len(rows) for g in groups)


def test_pd_fleet_forks_split_to_each_prefill_candidate() -> None:
    config = cfg(
        **{
            "policy.name": "static_pd",
            "fleet.instances": 4,
            "fleet.roles": "[prefill, prefill, decode, decode]",
        }
    )
    workload = load_workload(config.workload, config.seed)
    plain = SimFleet(config, workload, PROFILE)
    plain.run()
    records, rows = run_regret(config, workload, PROFILE, RegretSettings(every=4))
    assert rows and dumps(records) == dumps(plain.records)
    for row in rows:
        d = row["placements"]["policy"][1]
        assert row["placements"]["split:0"] == [0, d] and row["placements"]["split:1"] == [1, d]
        assert "least_loaded" not in row["placements"]  # no instance does both here
        assert set(row["outcomes"]) == set(row["placements"])


def test_a_regret_run_leaves_no_cyclic_garbage_behind() -> None:
    """Its forks are cycles made while the collector was off; a process that runs many regret
    runs (benchmarks/queued_prefix_loss.py) kept every run's until it ran out of memory."""
    import gc

    config = cfg(**{"policy.name": "unified"})
    workload = load_workload(config.workload, config.seed)
    gc.collect()
    _records, rows = run_regret(config, workload, PROFILE, RegretSettings(every=3))
    assert rows
    assert gc.collect() < 1000
