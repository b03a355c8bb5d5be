"""benchmarks/tiers_link_misspec.py's variants: each sets the link numbers it is named for,
derived from the hardware profile, so a refactor of the profile (or of predicted_ttft's
parameters) cannot silently make every variant the exact one. No simulator runs."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agentic_kvc.bench_scripts import load_benchmark
from agentic_kvc.policy.predicted_ttft import PredictedTTFTParams
from agentic_kvc.policy.tier_pricing import TierLinkSpeeds, link_speeds
from agentic_kvc.profiles.hardware import tier_links

bench = load_benchmark("tiers_link_misspec")


def effective(spec: dict[str, Any], hardware: str = "h20") -> TierLinkSpeeds:
    """The links predicted_ttft prices with under `spec` (None taken from the profile)."""
    p = PredictedTTFTParams.model_validate(spec.get("params", {}))  # unknown names refused
    return link_speeds(
        hardware,
        p.tier_host_h2d_gbps,
        p.tier_host_latency_s,
        p.tier_disk_read_gbps,
        p.tier_disk_latency_s,
    )


def test_exact_is_todays_policy_and_the_profiles_links() -> None:
    specs = bench.variants("h20")
    assert specs["exact"] == {"name": "predicted_ttft"}
    prof = tier_links("h20")
    got = effective(specs["exact"])
    assert got.host_bytes_per_s == prof.host_h2d_gbps * 1e9
    assert got.disk_bytes_per_s == prof.disk_read_gbps * 1e9
    assert (got.host_latency_s, got.disk_latency_s) == (prof.host_latency_s, prof.disk_latency_s)


@pytest.mark.parametrize("scale", [0.25, 0.5, 2.0, 4.0])
def test_bandwidth_variants_scale_both_reads_and_keep_latencies(scale: float) -> None:
    prof = tier_links("h20")
    got = effective(bench.variants("h20")[f"bw_x{scale:g}"])
    assert got.host_bytes_per_s == pytest.approx(prof.host_h2d_gbps * scale * 1e9)
    assert got.disk_bytes_per_s == pytest.approx(prof.disk_read_gbps * scale * 1e9)
    assert (got.host_latency_s, got.disk_latency_s) == (prof.host_latency_s, prof.disk_latency_s)


def test_latency_and_no_reload_variants() -> None:
    prof = tier_links("h20")
    specs = bench.variants("h20")
    lat = effective(specs["lat_x10"])
    assert lat.host_latency_s == pytest.approx(10 * prof.host_latency_s)
    assert lat.disk_latency_s == pytest.approx(10 * prof.disk_latency_s)
    assert lat.host_bytes_per_s == prof.host_h2d_gbps * 1e9
    free = effective(specs["no_reload"])
    assert free.host_latency_s == free.disk_latency_s == 0.0
    # a 200k-token context (Qwen3-Coder-30B-A3B: 98,304 bytes a token) in under 0.1 ms
    assert 200_000 * 98_304 / min(free.host_bytes_per_s, free.disk_bytes_per_s) < 1e-4


def test_every_wrong_variant_prices_differently_from_exact() -> None:
    specs = bench.variants("h20")
    exact = effective(specs["exact"])
    assert set(specs) == {
        "exact",
        "bw_x0.25",
        "bw_x0.5",
        "bw_x2",
        "bw_x4",
        "lat_x10",
        "no_reload",
        "tiers_unseen",
    }
    for label, spec in specs.items():
        if label not in ("exact", "tiers_unseen"):
            assert effective(spec) != exact, label


def test_tiers_unseen_turns_tier_pricing_off_with_exact_links() -> None:
    spec = bench.variants("h20")["tiers_unseen"]
    params = PredictedTTFTParams.model_validate(spec["params"])
    assert params.tier_pricing is False
    assert PredictedTTFTParams().tier_pricing is True  # so the variant differs from exact
    assert effective(spec) == effective(bench.variants("h20")["exact"])


def test_variants_follow_the_profile_not_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """With other profile numbers the variants move with them (derived, not hard-coded)."""
    other = replace(tier_links("h20"), host_h2d_gbps=7.0, disk_read_gbps=3.0, host_latency_s=2e-3)
    monkeypatch.setattr(bench, "tier_links", lambda _hw: other)
    specs = bench.variants("h20")
    assert specs["bw_x0.5"]["params"]["tier_host_h2d_gbps"] == 3.5
    assert specs["bw_x4"]["params"]["tier_disk_read_gbps"] == 12.0
    assert specs["lat_x10"]["params"]["tier_host_latency_s"] == pytest.approx(2e-2)


def test_specs_carry_each_variant_and_peer_per_replicate() -> None:
    cell = {
        "name": "probe",
        "base": "config/runs/sim_h20_agentic_long.yaml",
        "set": {"fleet.instances": 4, "fleet.kv_tiers.host_gib": 128},
        "rep": ("seed", [0, 1]),
    }
    runs = bench.specs(cell)
    want = {**bench.variants("h20"), **{p: {"name": p} for p in bench.PEERS}}
    assert "predicted_ttft" not in bench.PEERS and len(bench.PEERS) >= 1
    assert len(runs) == 2 * len(want)
    for label, rep, sets in runs:
        pol = [s for s in sets if s.startswith("policy=")]
        assert len(pol) == 1 and json.loads(pol[0].removeprefix("policy=")) == want[label]
        assert f"seed={rep}" in sets and "fleet.kv_tiers.host_gib=128" in sets


def test_a_cell_that_sets_its_own_links_is_refused() -> None:
    cell = {
        "name": "own links",
        "base": "config/runs/sim_h20_agentic_long.yaml",
        "set": {"fleet.kv_tiers.host_gib": 16, "fleet.kv_tiers.host_h2d_gbps": 20.0},
        "rep": ("seed", [0]),
    }
    with pytest.raises(ValueError, match="host_h2d_gbps"):
        bench.specs(cell)


def _cmp(rel: float, lo: float, hi: float) -> dict[str, Any]:
    return {"rel": rel, "ci": [lo, hi], "pairs": 3}


def test_headline_counts_only_intervals_that_exclude_zero() -> None:
    level = {"ttft_p90": _cmp(0.0, 0.0, 0.0), "e2e_p90": _cmp(0.01, -0.01, 0.02)}
    worse = {"ttft_p90": _cmp(0.05, 0.01, 0.09), "e2e_p90": _cmp(-0.03, -0.05, -0.001)}
    report = {
        "cells": {
            "a": {
                "runs": 10,
                "batch_cpu_s": 1.5,
                "variants": {
                    "exact": {"vs_best_peer": worse},  # not a comparison with exact links
                    "bw_x2": {"vs_best_peer": level, "vs_exact": level},
                    "bw_x4": {"vs_best_peer": level, "vs_exact": worse},
                },
            },
            "b": {"runs": 5, "batch_cpu_s": 2.0, "variants": {"lat_x10": {"vs_exact": level}}},
        }
    }
    assert bench.headline(report) == {
        "runs": 15,
        "batch_cpu_s": 3.5,
        "intervals_vs_exact_excluding_0": 2,
        "largest_ttft_p90_change_vs_exact": 0.05,
    }
    # tiers_unseen is counted apart: it is not a wrong link number
    far = {"ttft_p90": _cmp(0.3, 0.1, 0.5), "e2e_p90": _cmp(0.01, -0.01, 0.02)}
    report["cells"]["b"]["variants"]["tiers_unseen"] = {"vs_exact": far}
    got = bench.headline(report)
    assert got["intervals_vs_exact_excluding_0"] == 2
    assert got["largest_ttft_p90_change_vs_exact"] == 0.05
    assert got["tiers_unseen_intervals_excluding_0"] == 1
    assert got["tiers_unseen_largest_ttft_p90_change"] == 0.3
