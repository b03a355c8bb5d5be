"""The simulated lifecycle grid: the simulator's transfer and prefill costs, deterministic."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentic_kvc.analysis.studies import lifecycle
from agentic_kvc.config import SimConfig
from agentic_kvc.lifecycle.cli import lifecycle as lifecycle_cli
from agentic_kvc.lifecycle.grids import GRIDS
from agentic_kvc.lifecycle.sim_grid import rows


def test_rows_follow_the_simulator_cost_forms() -> None:
    got = list(rows([0, 65_536], [512, 32_768], [1, 128]))
    assert len(got) == 8
    by = {(r["C"], r["N"], r["O"]): r for r in got}
    sim = SimConfig()
    for r in got:
        # PD pays the pull and D's first step on top of the same prefill.
        assert r["pd_minus_colo_ttft_ms"] == pytest.approx(
            r["transfer_ms"] + r["d_first_step_ms"], abs=2e-3
        )
        assert r["transfer_ms"] >= sim.kv_transfer_fixed_s * 1e3
        assert (r["decode_ms"] > 0) == (r["O"] > 1)
    # Incremental transfer: C changes the prefill (attention), not the bytes or the pull.
    for n in (512, 32_768):
        a, b = by[(0, n, 1)], by[(65_536, n, 1)]
        assert a["kv_bytes"] == b["kv_bytes"] and a["transfer_ms"] == b["transfer_ms"]
        assert b["prefill_ms"] > a["prefill_ms"]
    assert by[(0, 32_768, 1)]["transfer_ms"] > by[(0, 512, 1)]["transfer_ms"]


def test_cli_writes_the_gpu_grid_deterministically_and_the_section_shows_it(
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    outs = []
    for name in ("a.csv", "b.csv"):
        res = runner.invoke(lifecycle_cli, ["sim-grid", "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["rows"] == len(list(GRIDS["gpu"].cells()))
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1]
    with (tmp_path / "a.csv").open() as fh:
        assert {int(r["C"]) for r in csv.DictReader(fh)} == set(GRIDS["gpu"].cs)
    from agentic_kvc.analysis.studies.base import Section

    s = Section("t", "t", "q")
    lifecycle.sim_grid_section(s, tmp_path / "a.csv")
    md = s.markdown()
    assert "| C | N=512 |" in md and "| 102400 |" in md
