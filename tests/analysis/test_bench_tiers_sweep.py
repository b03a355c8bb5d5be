"""benchmarks/tiers_sweep.py, the loop the KV-tier benchmarks share: per unit its runs, the
benchmark's own figures and the batch's timing; every file says its benchmark, machine and
command; the two layouts its readers take; `--only` and `--table`; and the four benchmarks'
units are the cells and tier setups they always had. No simulator runs (`run_specs` faked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentic_kvc.analysis.bench_summary.tiers import form_cells
from agentic_kvc.bench_scripts import load_benchmark
from agentic_kvc.config import override_item

sweep = load_benchmark("tiers_sweep")


def _cell(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "base": "config/runs/sim_h20_agentic_long.yaml",
        "set": {"fleet.instances": 4},
        "rep": ("seed", [0, 1]),
        "hosts": [0, 16],
    }


def _specs(cell: dict[str, Any], host: float) -> list[Any]:
    return sweep.cell_runs(cell, {"today": {"name": "predicted_ttft"}}, [f"host={host}"])


def _run(
    monkeypatch: pytest.MonkeyPatch,
    out: Path,
    *extra: str,
    layout: str = "flat",
    calls: list[str] | None = None,
) -> int:
    """The sweep over two cells x two hosts, `run_specs` faked (it records each unit's base)."""

    def fake_run_specs(results: Path, base: str, runs: list[Any]) -> tuple[Any, float, float]:
        if calls is not None:
            calls.append(base)
        return [(lab, rep, [{"n": len(sets)}]) for lab, rep, sets in runs], 2.04, 1.96

    monkeypatch.setattr(sweep, "run_specs", fake_run_specs)
    argv = ["tiers_probe.py", "--results", str(out.parent), "--out", str(out), *extra]
    monkeypatch.setattr(sys, "argv", argv)

    def analyse(unit: Any, rows: Any, results: Path) -> dict[str, Any]:
        return {"today_vs_peer": {"rows": len(rows), "n": unit.instances, "host": unit.host}}

    def headline(report: dict[str, Any]) -> dict[str, Any]:
        return {"units": len(report["cells"])}

    return int(
        sweep.main(
            "tiers_probe",
            "A probe sweep.\n\nMore.",
            out.parent,
            lambda: sweep.per_host([_cell("a"), _cell("bb")], _specs),
            analyse,
            lambda units: "\n".join(sorted(units)),
            layout=layout,  # type: ignore[arg-type]
            headline=headline if layout == "cells" else None,
        )
    )


def test_each_unit_gets_its_figures_timing_and_the_file_its_machine_and_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "probe.json"
    calls: list[str] = []
    assert _run(monkeypatch, out, calls=calls) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "tiers_probe"
    assert "--out" in doc["command"] and str(out) in doc["command"]
    assert {"cpu", "cores_visible", "git", "git_dirty"} <= set(doc["machine"])
    units = sweep.units_of(doc, "flat")
    assert sorted(units) == ["a/host_0", "a/host_16", "bb/host_0", "bb/host_16"]
    assert len(calls) == 4  # one run-batch call per unit
    u = units["a/host_16"]
    assert (u["runs"], u["batch_wall_s"], u["batch_cpu_s"]) == (2, 2.0, 2.0)
    assert u["today_vs_peer"] == {"rows": 2, "n": 4, "host": 16}
    assert len(u["load_avg_1min"]) == 2 and u["started"].endswith("UTC")
    # the flat layout's readers see the units, not the stamp
    assert sorted(form_cells({k: {"today_vs_x": 1} for k in units} | doc)) == sorted(units)


def test_only_keeps_the_other_units_of_an_earlier_file_and_table_prints_units(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "probe.json"
    out.write_text(json.dumps({"old/host_0": {"runs": 9}}))
    calls: list[str] = []
    assert _run(monkeypatch, out, "--only", "bb", calls=calls) == 0
    doc = json.loads(out.read_text())
    assert sorted(sweep.units_of(doc, "flat")) == ["bb/host_0", "bb/host_16", "old/host_0"]
    assert len(calls) == 2
    capsys.readouterr()
    assert _run(monkeypatch, out, "--table") == 0
    assert capsys.readouterr().out.split() == ["bb/host_0", "bb/host_16", "old/host_0"]


def test_the_cells_layout_nests_units_in_sweep_order_with_the_headline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "probe.json"
    assert _run(monkeypatch, out, layout="cells") == 0
    doc = json.loads(out.read_text())
    assert list(doc["cells"]) == ["a/host_0", "a/host_16", "bb/host_0", "bb/host_16"]
    assert doc["units"] == 4 and doc["benchmark"] == "tiers_probe" and "machine" in doc


def test_cell_runs_carry_cell_replicate_policy_and_tier_in_that_order() -> None:
    runs = _specs(_cell("a"), 16)
    assert [(lab, rep) for lab, rep, _ in runs] == [("today", "0"), ("today", "1")]
    assert runs[1][2] == [
        override_item("fleet.instances", 4),
        override_item("seed", 1),
        override_item("policy", {"name": "predicted_ttft"}),
        "host=16",
    ]
    assert sweep.host_key("m", 16.0) == "m/host_16" and sweep.host_key("m", "16+disk") == (
        "m/host_16+disk"
    )


def test_the_benchmarks_units_are_their_cells_and_tier_setups() -> None:
    lifetime = load_benchmark("tiers_opening_lifetime")
    online = load_benchmark("tiers_online_cost")
    keys = [u.key for u in sweep.per_host(lifetime.cells(), lifetime.specs)]
    assert "tracelab_x2/host_16" in keys and "mooncake_x0.2/host_128" in keys
    assert len(keys) == len(set(keys)) == sum(len(c["hosts"]) for c in lifetime.cells())
    units = list(sweep.per_host(online.our_cells(), online.specs))
    disk = next(u for u in units if u.key == "mooncake_x0.2/host_16+disk")
    assert disk.host == online.DISK and disk.instances == 4
    assert {lab for lab, _r, _s in disk.runs} == {"today", *online.ONLINE, *online.PEERS}
