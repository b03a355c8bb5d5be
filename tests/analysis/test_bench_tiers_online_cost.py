"""benchmarks/tiers_online_cost.py's plan and table: the online variants are the cost models
they are named for, the tier setups are the study's own, the peers are the study's, and the
online-fit rows of every cell land under one header. No simulator runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentic_kvc.analysis.studies import tiers
from agentic_kvc.bench_scripts import load_benchmark
from agentic_kvc.config import override_item
from agentic_kvc.policy.predicted_ttft import PredictedTTFTParams

bench = load_benchmark("tiers_online_cost")
REPO = Path(__file__).resolve().parents[2]


def test_online_variants_fit_online_from_their_prior_and_today_uses_the_profile() -> None:
    got = {
        lab: PredictedTTFTParams.model_validate(spec.get("params", {}))
        for lab, spec in bench.ONLINE.items()
    }
    assert (got["online_generic"].cost_model, got["online_generic"].online_prior) == (
        "online",
        "generic",
    )
    assert (got["online_profile"].cost_model, got["online_profile"].online_prior) == (
        "online",
        "profile",
    )
    today = PredictedTTFTParams.model_validate(bench.TODAY.get("params", {}))
    assert today.cost_model == "profile"


def _disk_experiment() -> dict[str, Any]:
    exps = yaml.safe_load((REPO / "config/config.yaml").read_text())["experiments"]
    return next(e for e in exps if e["name"] == "tiers_mooncake_hi_disk")["set"]


def test_cells_carry_the_studys_peers_and_the_asked_tier_setups() -> None:
    cells = {c["name"]: c for c in bench.our_cells()}
    for c in cells.values():
        assert sorted(c["peers"]) == sorted(r for r in tiers.ROUTERS if r != tiers.OURS)
    for name in ("agentic-long_0.05", "agentic-long_0.1"):
        assert cells[name]["hosts"] == [0, 128]
        assert cells[name]["rep"] == ("seed", [0, 1, 2, 3, 4])
    moon = cells["mooncake_x0.2"]
    assert moon["hosts"][-1] == bench.DISK
    disk = {k: v for k, v in _disk_experiment().items() if k.startswith("fleet.kv_tiers.")}
    sets = bench.tier_sets(moon, bench.DISK)
    assert len(sets) == len(disk) >= 3
    assert sets == [override_item(k, v) for k, v in disk.items()]
    assert bench.tier_sets(moon, 128) == [override_item("fleet.kv_tiers.host_gib", 128)]
    labs = {lab for lab, _rep, _sets in bench.specs(moon, bench.DISK)}
    assert labs == {"today", *bench.ONLINE, *moon["peers"]}


def _cmp(ttft: float) -> dict[str, Any]:
    one = {"rel": ttft, "ci": [ttft - 0.01, ttft + 0.01], "pairs": 3}
    return {"ttft_p90": one, "e2e_p90": one}


def _fit(key: str) -> str:
    return (
        "caption\n\n| variant | backend |\n|---|--:|\n"
        f"| {key} online_generic | sim |\n| {key} online_profile | sim |"
    )


def test_table_picks_the_peer_today_does_worst_against_and_joins_the_fits() -> None:
    cell: dict[str, Any] = {"fit": _fit("a"), "online_generic_vs_today": _cmp(0.05)}
    cell["online_profile_vs_today"] = _cmp(0.0)
    for peer, today in (("dynamo_kv", -0.2), ("sticky_least_loaded", -0.5)):
        cell[f"today_vs_{peer}"] = _cmp(today)
        cell[f"online_generic_vs_{peer}"] = _cmp(today + 0.05)
        cell[f"online_profile_vs_{peer}"] = _cmp(today)
    other = {**cell, "fit": _fit("b")}
    out = bench.table({"a": cell, "b": other})
    assert bench.worst_peer_of_today(cell) == "dynamo_kv"
    assert "| a | dynamo_kv | -20.0% [-21.0, -19.0]" in out
    assert "-15.0% [-16.0, -14.0]" in out  # generic vs dynamo_kv
    assert out.count("| variant | backend |") == 1
    assert out.count("online_generic | sim |") == 2
