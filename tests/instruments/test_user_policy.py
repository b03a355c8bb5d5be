"""The instruments on a policy a user adds (registered like any other) and through the CLI on
a run directory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from agentic_kvc.cli import main
from agentic_kvc.instruments.cache_error import errors, run_cache_error
from agentic_kvc.instruments.regret import RegretSettings, run_regret
from agentic_kvc.instruments.routers import run_routers
from agentic_kvc.io import read_jsonl
from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy
from agentic_kvc.policy.registry import list_policies, register
from agentic_kvc.runs import execute
from agentic_kvc.workload import load_workload

from .scenarios import PROFILE, cfg, dumps


class LastInstance(ColocatingPolicy):
    """A user's policy: always the highest-numbered instance (cache-blind)."""

    name = "test_last_instance"

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        return candidates[-1], "last", {}


if LastInstance.name not in list_policies():
    register(LastInstance)


def test_a_user_policy_runs_under_every_instrument() -> None:
    config = cfg(**{"policy.name": LastInstance.name})
    workload = load_workload(config.workload, config.seed)
    records, rows = run_regret(config, workload, PROFILE, RegretSettings(every=3))
    assert rows and all(r["policy"] == LastInstance.name for r in rows)
    assert all(r["placements"]["policy"] == [1, 1] for r in rows)
    _rec, cache_rows = run_cache_error(config, workload, PROFILE)
    assert all(errors(r, "exact") == [(0, 0), (0, 0)] for r in cache_rows)
    one, _s, _r = run_routers(config, workload, PROFILE, replicas=1)
    assert dumps(one) == dumps(records)


def test_regret_cli_on_a_run_directory(tmp_path: Path) -> None:
    config = cfg(**{"policy.name": "round_robin", "workload.generator.sessions": 3})
    run_dir = execute(config, tmp_path)
    runner = CliRunner()
    got = runner.invoke(main, ["regret", str(run_dir), "--every", "2"])
    assert got.exit_code == 0, got.output
    assert "byte for byte" in got.output
    rows = list(read_jsonl(run_dir / "regret.jsonl"))
    assert rows and all(r["regret_ttft_s"] >= 0 for r in rows)
    got = runner.invoke(main, ["cache-error", str(run_dir)])
    assert got.exit_code == 0, got.output
    assert (run_dir / "cache_error.jsonl").is_file()
    got = runner.invoke(main, ["routers", str(run_dir), "--replicas", "1,2"])
    assert got.exit_code == 0, got.output
    r1, r2 = (json.loads(x) for x in (run_dir / "routers.jsonl").read_text().splitlines())
    assert (r1["replicas"], r2["replicas"]) == (1, 2)
