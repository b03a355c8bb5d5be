"""Simulated runs are grouped into batches per experiment; real and archived runs are not."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from agentic_kvc.analysis.experiments import expand


def test_batches_per_experiment_deduplicated_and_bounded(tmp_path: Path) -> None:
    (tmp_path / "sim.yaml").write_text(
        yaml.safe_dump({"backend": "sim", "workload": {"generator": {"sessions": 2}}})
    )
    (tmp_path / "real.yaml").write_text(
        yaml.safe_dump({"backend": "vllm", "workload": {"generator": {"sessions": 2}}})
    )
    experiments = [
        {"name": "a", "base": "sim.yaml", "matrix": {"seed": list(range(5))}},
        # Seeds 0-4 repeat experiment a's runs: they stay in a's batches.
        {"name": "b", "base": "sim.yaml", "matrix": {"seed": list(range(7))}},
        {"name": "real", "base": "real.yaml", "matrix": {"seed": [0, 1]}},
    ]
    plan = expand(experiments, tmp_path)
    batches = plan.sim_batches(size=3)
    assert {k: len(v) for k, v in batches.items()} == {"a.0": 3, "a.1": 2, "b.0": 2}
    batched = [r.run_id for runs in batches.values() for r in runs]
    assert len(batched) == len(set(batched)) == 7
    assert all(r.backend == "sim" for runs in batches.values() for r in runs)
    assert set(plan.to_run()) - set(batched) == {r.run_id for r in plan.runs if r.backend == "vllm"}


def test_real_batches_one_per_experiment_repeat_major_rotated(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text(
        yaml.safe_dump({"backend": "vllm", "workload": {"generator": {"sessions": 2}}})
    )
    experiments = [
        {
            "name": "real",
            "base": "real.yaml",
            "matrix": {
                "repeat": [0, 1, 2, 3],
                "policy.name": ["round_robin", "lmetric", "unified"],
            },
        },
        # Real runs without a repeat are not batched: they stay one job each.
        {"name": "single", "base": "real.yaml", "matrix": {"seed": [5, 6]}},
    ]
    plan = expand(experiments, tmp_path)
    batches = plan.real_batches()
    assert list(batches) == ["real"]
    runs = batches["real"]
    assert [r.labels["repeat"] for r in runs] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    orders = [[r.policy for r in runs[i : i + 3]] for i in range(0, 12, 3)]
    assert orders[0] == ["round_robin", "lmetric", "unified"]
    assert orders[1] == ["lmetric", "unified", "round_robin"]
    assert orders[2] == ["unified", "round_robin", "lmetric"]
    assert orders[3] == orders[0]
    # Every variant takes every position once over the first three repeats.
    for pos in range(3):
        assert {o[pos] for o in orders[:3]} == {"round_robin", "lmetric", "unified"}
    unbatched = {r.run_id for r in plan.runs} - {r.run_id for r in runs}
    assert unbatched == {r.run_id for r in plan.runs if r.experiment == "single"}


def test_interleaved_experiments_share_a_batch_their_pairs_side_by_side(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text(
        yaml.safe_dump({"backend": "vllm", "workload": {"generator": {"sessions": 2}}})
    )
    matrix = {"repeat": [0, 1, 2, 3], "policy.name": ["round_robin", "lmetric", "unified"]}
    experiments = [
        {"name": "hbm", "base": "real.yaml", "interleave": "tiers", "matrix": matrix},
        {
            "name": "host",
            "base": "real.yaml",
            "interleave": "tiers",
            "set": {"fleet.kv_tiers.host_gib": 1},
            "matrix": matrix,
        },
        # Not in the group: its own batch, as before.
        {"name": "alone", "base": "real.yaml", "set": {"seed": 7}, "matrix": matrix},
    ]
    plan = expand(experiments, tmp_path)
    batches = plan.real_batches()
    assert set(batches) == {"tiers", "alone"}
    runs = batches["tiers"]
    assert len(runs) == len({r.run_id for r in runs}) == 24
    assert [r.labels["repeat"] for r in runs] == [k for k in range(4) for _ in range(6)]
    for k in range(4):
        rows = [(r.experiment, r.policy) for r in runs[6 * k : 6 * k + 6]]
        # The two fleets alternate run by run, each pair (one policy on both) back to back.
        assert [e for e, _ in rows[0::2]] == [rows[0][0]] * 3
        assert [e for e, _ in rows[1::2]] == [rows[1][0]] * 3
        assert rows[0][0] != rows[1][0]
        assert all(rows[i][1] == rows[i + 1][1] for i in (0, 2, 4))
    firsts = [runs[6 * k].experiment for k in range(4)]
    assert firsts == ["hbm", "host", "hbm", "host"]  # each side first in turn
    # Every policy leads a repeat once over the first three.
    assert {runs[6 * k].policy for k in range(3)} == {"round_robin", "lmetric", "unified"}
    alone = batches["alone"]
    assert [r.policy for r in alone[:3]] == ["round_robin", "lmetric", "unified"]
    assert [r.policy for r in alone[3:6]] == ["lmetric", "unified", "round_robin"]
    # The group survives the plan's JSON (the pipeline reads plan.json).
    again = type(plan).from_json(json.loads(json.dumps(plan.to_json())))
    assert [r.run_id for r in again.real_batches()["tiers"]] == [r.run_id for r in runs]


def test_interleave_is_refused_where_it_would_do_nothing(tmp_path: Path) -> None:
    import pytest

    from agentic_kvc.config import ConfigError

    (tmp_path / "sim.yaml").write_text(
        yaml.safe_dump({"backend": "sim", "workload": {"generator": {"sessions": 2}}})
    )
    (tmp_path / "real.yaml").write_text(
        yaml.safe_dump({"backend": "vllm", "workload": {"generator": {"sessions": 2}}})
    )
    for base, matrix in (("sim.yaml", {"seed": [0, 1]}), ("real.yaml", {"seed": [0, 1]})):
        exp = {"name": "x", "base": base, "interleave": "g", "matrix": matrix}
        with pytest.raises(ConfigError, match="experiment 'x': interleave groups real-engine"):
            expand([exp], tmp_path)
