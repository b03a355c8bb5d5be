"""The field_pathologies benchmark's summary: each registered prediction is met only where every
held-out claim holds, judged from the numbers (the explored scenarios are shown, not judged)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentic_kvc.analysis.bench_summary.core import MET, NOT_MEASURED, NOT_MET, LayoutError
from agentic_kvc.analysis.bench_summary.policies import PATHOLOGY_OURS as OURS
from agentic_kvc.analysis.bench_summary.policies import pathology_predictions
from agentic_kvc.bench_scripts import load_benchmark
from tests.analysis.test_bench_summary import summarize, verdict

COLLAPSE = "collapse: busiest"
COST = "collapse costs latency"
SPIRAL = "spiral:"


def cell(rel: float, lo: float, hi: float) -> dict[str, Any]:
    return {"rel_diff": rel, "ci_low": lo, "ci_high": hi, "significant": not lo <= 0 <= hi}


NS = cell(0.01, -0.02, 0.04)


def policy(share: float, preemptions: int = 0, **vs: dict[str, Any]) -> dict[str, Any]:
    base = {"ttft_p90": NS, "e2e_p90": NS, "hit_rate": NS}
    return {
        "busiest_request_share": share,
        "busiest_opening_share": share,
        "preemptions": preemptions,
        "vs_ours": base | vs,
    }


def collapse(name: str, explored: bool, sglang: float, ttft: dict[str, Any]) -> dict[str, Any]:
    pols = {
        "sglang_cache_aware": policy(sglang, ttft_p90=ttft),
        "llmd_weighted": policy(0.6),
        "dynamo_kv": policy(0.14),
        "predicted_ttft": policy(0.16),
    }
    del pols["predicted_ttft"]["vs_ours"]
    return result(name, "collapse", explored, pols)


def spiral(name: str, explored: bool, preempt: int, hit: dict[str, Any]) -> dict[str, Any]:
    worse = cell(0.5, 0.2, 0.9)
    pols = {
        "consistent_hash": policy(0.17, preempt, hit_rate=hit, ttft_p90=worse),
        "predicted_ttft": policy(0.15, 10),
    }
    return result(name, "spiral", explored, pols)


def result(name: str, kind: str, explored: bool, pols: dict[str, Any]) -> dict[str, Any]:
    return {
        "scenario": name,
        "kind": kind,
        "explored_before_registration": explored,
        "fair_share": 0.125,
        "policies": pols,
    }


def doc(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"benchmark": "field_pathologies", "results": results}


LOWER = cell(-0.2, -0.3, -0.1)
HIGHER = cell(0.3, 0.1, 0.5)


def test_predictions_that_hold_on_the_held_out_scenarios_are_met(tmp_path: Path) -> None:
    rows = [
        collapse("explored", True, 0.1, NS),  # explored: shown, not judged
        collapse("held", False, 0.8, HIGHER),
        spiral("held_spiral", False, 100, LOWER),
    ]
    out = summarize(tmp_path, "field_pathologies", doc(rows))
    assert verdict(out, COLLAPSE) == MET
    assert verdict(out, COST) == MET
    assert verdict(out, SPIRAL) == MET
    first = next(r for r in out if COLLAPSE in r.measure)
    assert first.value.startswith("4 of 4 held-out claims hold")
    assert "explored before registration: 3 of 4" in first.value  # sglang 0.1 < 0.25
    behind = next(r for r in out if r.measure.startswith("predicted_ttft significantly behind"))
    assert behind.value == "0 of 3"
    opens = next(r for r in out if r.measure.startswith("busiest instance's share of session"))
    assert opens.value == "explored 0.10 / 0.60 / 0.16; held 0.80 / 0.60 / 0.16"


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([collapse("held", False, 0.24, HIGHER)], COLLAPSE),  # just under twice the fair share
        ([collapse("held", False, 0.8, NS)], COST),  # the cost not significant
        ([spiral("held", False, 99, LOWER)], SPIRAL),  # 9.9x ours, not 10x
        ([spiral("held", False, 100, NS)], SPIRAL),  # hit rate not significantly lower
    ],
)
def test_one_failing_held_out_claim_misses_its_prediction(
    tmp_path: Path, rows: list[dict[str, Any]], needle: str
) -> None:
    out = summarize(tmp_path, "field_pathologies", doc(rows))
    assert verdict(out, needle) == NOT_MET
    assert "(not: held:" in next(r for r in out if needle in r.measure).value


def test_a_peer_added_after_the_registration_is_shown_not_judged(tmp_path: Path) -> None:
    rows = [collapse("held", False, 0.8, HIGHER), collapse("other", False, 0.8, HIGHER)]
    rows[0]["policies"]["newcomer"] = policy(1.0, ttft_p90=cell(2.0, 1.0, 3.0))
    rows[1]["policies"]["newcomer"] = policy(0.5, ttft_p90=cell(0.5, 0.2, 0.9))
    out = summarize(tmp_path, "field_pathologies", doc(rows))
    row = next(r for r in out if r.measure.startswith("newcomer (added after"))
    assert row.value == "0.50-1.00 over 2 scenarios; +50.0% to +200.0%"
    assert verdict(out, COLLAPSE) == MET  # its 1.0 share judges nothing


def test_a_peer_significantly_ahead_of_ours_is_listed(tmp_path: Path) -> None:
    rows = [collapse("held", False, 0.8, HIGHER)]
    rows[0]["policies"]["dynamo_kv"]["vs_ours"]["e2e_p90"] = LOWER
    out = summarize(tmp_path, "field_pathologies", doc(rows))
    behind = next(r for r in out if r.measure.startswith("predicted_ttft significantly behind"))
    assert behind.value.startswith("1 of 1: held E2E p90 vs dynamo_kv -20.0%")


def test_an_unknown_scenario_kind_is_a_layout_error() -> None:
    with pytest.raises(LayoutError, match="unknown scenario kind 'hotspot'"):
        pathology_predictions("hotspot", {}, 0.125)


def test_the_benchmark_writes_what_its_summary_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small real run of benchmarks/field_pathologies.py (two policies, two seeds, the chat
    collapse): its file carries the layout the summary and the findings read."""
    bench = load_benchmark("field_pathologies")
    out = tmp_path / "field_pathologies.json"
    argv = ["x", "--scenarios", "collapse_chat", "--policies", "sglang_cache_aware,predicted_ttft"]
    monkeypatch.setattr("sys.argv", [*argv, "--seeds", "0,1", "--out", str(out)])
    assert bench.main() == 0
    doc = json.loads(out.read_text())
    (result,) = doc["results"]
    sglang = result["policies"]["sglang_cache_aware"]
    assert sglang["runs"] == 2 and sglang["busiest_request_share"] > 0.5  # the collapse
    assert result["policies"]["predicted_ttft"]["busiest_request_share"] < 0.25
    assert set(sglang["vs_ours"]) == {"ttft_p90", "e2e_p90", "hit_rate", "token_max_over_min"}
    rows = summarize(tmp_path, "field_pathologies", doc)
    assert verdict(rows, COLLAPSE) == NOT_MEASURED  # the scenario was explored: not judged
    first = next(r for r in rows if COLLAPSE in r.measure)
    assert first.value == "no held-out scenario in this file; explored before registration: 2 of 2"


def real_run(backend: str, policy: str, share: float) -> dict[str, Any]:
    load = {"mean": 1.0 if policy == OURS else 2.0, "max": 3.0} if backend == "vllm" else None
    return {
        "backend": backend,
        "policy": policy,
        "busiest_request_share": share,
        "load1_replay": load,
    }


def real_doc(sglang: list[float], ours: list[float]) -> dict[str, Any]:
    pairs = {m: cell(0.1, -0.2, 0.4) for m in ("ttft_p50", "ttft_p90", "e2e_p90", "hit_rate")}
    backends = {}
    for b in ("vllm", "sim"):
        runs = [real_run(b, "sglang_cache_aware", x) for x in sglang]
        runs += [real_run(b, "predicted_ttft", x) for x in ours]
        backends[b] = {"runs": runs, "sglang_cache_aware_vs_ours": pairs}
    return {"benchmark": "field_pathologies_real", "backends": backends}


@pytest.mark.parametrize(
    ("sglang", "ours", "met"),
    [
        ([1.0, 0.8, 0.75], [0.5, 0.6, 0.8], True),  # sglang at its line, ours 0.63
        ([1.0, 0.74, 1.0], [0.5, 0.5, 0.5], False),  # one seed's collapse under 0.75
        ([1.0, 1.0, 1.0], [0.5, 0.6, 0.9], False),  # ours' mean 0.67
    ],
)
def test_the_real_collapse_is_judged_per_seed_and_on_ours_mean(
    tmp_path: Path, sglang: list[float], ours: list[float], met: bool
) -> None:
    out = summarize(tmp_path, "field_pathologies_real", real_doc(sglang, ours))
    expect = MET if met else NOT_MET
    assert verdict(out, "real engines: busiest") == expect
    assert verdict(out, "simulator, same configs: busiest") == expect
    loads = next(r for r in out if r.measure.startswith("real runs: 1-minute load"))
    assert loads.value == "1.0-2.0 (3.0)"
    latency = next(r for r in out if r.measure.startswith("real engines: sglang_cache_aware vs"))
    assert latency.value == "+10.0% [-20.0, +40.0] n.s. / +10.0% [-20.0, +40.0] n.s."


def test_identical_decisions_read_as_the_run_to_run_spread(tmp_path: Path) -> None:
    doc = real_doc([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    doc["backends"]["vllm"]["sglang_cache_aware_vs_ours"]["hit_rate"] = {"n_differ": 0}
    out = summarize(tmp_path, "field_pathologies_real", doc)
    latency = next(r for r in out if r.measure.startswith("real engines: sglang_cache_aware vs"))
    assert latency.value.startswith("every request placed alike, so this is the run-to-run")


def confirm(opening: float, ps_share: float, sglang: dict[str, Any]) -> dict[str, Any]:
    pols = {
        "sglang_cache_aware": policy(0.3, ttft_p90=sglang),
        "llmd_weighted": policy(0.3),
        "production_stack_prefix": policy(ps_share),
        "dynamo_kv": policy(0.14),
        "predicted_ttft": policy(0.16),
    }
    del pols["predicted_ttft"]["vs_ours"]
    for p in ("sglang_cache_aware", "llmd_weighted"):
        pols[p]["busiest_opening_share"] = opening
    return result("held", "confirm", False, pols)


def confirm_doc(r: dict[str, Any]) -> dict[str, Any]:
    return {"benchmark": "field_pathologies_confirm", "results": [r]}


def test_the_confirmatory_check_is_judged_on_openings(tmp_path: Path) -> None:
    out = summarize(tmp_path, "field_pathologies_confirm", confirm_doc(confirm(0.3, 1.0, HIGHER)))
    assert [r.verdict for r in out if r.goal != "-"] == [MET] * 4
    # openings under twice the fair share; production-stack spread; no latency cost; a peer ahead
    bad = confirm(0.24, 0.89, NS)
    bad["policies"]["dynamo_kv"]["vs_ours"]["e2e_p90"] = LOWER
    out = summarize(tmp_path, "field_pathologies_confirm", confirm_doc(bad))
    assert [r.verdict for r in out if r.goal != "-"] == [NOT_MET] * 4
    ahead = next(r for r in out if r.measure.startswith("predicted_ttft significantly behind no"))
    assert "dynamo_kv E2E p90 -20.0% [-30.0, -10.0]" in ahead.value
    # every policy of the confirmatory check was registered: no "added after" rows
    assert not [r for r in out if "added after the registration" in r.measure]
