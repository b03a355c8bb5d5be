"""The tiers study's section from real simulated runs: a small fleet whose KV space is too
small for its sessions, HBM only against a host tier (and a disk, and unlimited HBM)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from agentic_kvc.analysis.experiments import expand
from agentic_kvc.analysis.studies.base import load_study
from agentic_kvc.analysis.studies.tiers import (
    CEILING,
    DISK_SETUP,
    HBM_ONLY,
    OURS,
    WORST_SETUP,
    analyse,
    cell_rows,
    simulated,
    tier_of,
)
from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json
from agentic_kvc.paired import fmt_diff, paired_compare
from agentic_kvc.runs import execute

BASE = {
    "backend": "sim",
    "workload": {
        "generator": {
            "preset": "agentic-coding",
            "sessions": 12,
            "params": {
                "first_turn_median_tokens": 4000,
                "max_context_tokens": 12000,
                "session_rate_per_s": 2.0,
            },
        }
    },
    "fleet": {
        "instances": 2,
        "model": "qwen3-coder-30b-a3b",
        "hardware": "h20",
        "kv_cache_tokens": 24576,
    },
}
POLICIES = ["sglang_cache_aware", "dynamo_kv", "predicted_ttft"]
SEEDS = [0, 1, 2]


def test_tier_of() -> None:
    assert tier_of("tiers_x_hi", 0) == HBM_ONLY and tier_of("tiers_x_hi", None) == HBM_ONLY
    assert tier_of("tiers_x_hi", 16.0) == "host 16 GiB"
    assert tier_of("tiers_x_hi_disk", None) == DISK_SETUP
    assert tier_of("tiers_x_hi_ceiling", None) == CEILING


@pytest.fixture(scope="module")
def section(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("tiers")
    (root / "base.yaml").write_text(yaml.safe_dump(BASE))
    cell = {"study": "tiers", "variant": "small", "base": "base.yaml"}
    experiments = [
        {
            **cell,
            "name": "tiers_small_hi",
            "matrix": {
                "policy.name": POLICIES,
                "fleet.kv_tiers.host_gib": [0, 1],
                "seed": SEEDS,
            },
        },
        {
            **cell,
            "name": "tiers_small_hi_disk",
            "set": {"fleet.kv_tiers.host_gib": 0.25, "fleet.kv_tiers.disk_gib": 8},
            "matrix": {"policy.name": POLICIES, "seed": SEEDS},
        },
        {
            **cell,
            "name": "tiers_small_hi_ceiling",
            "set": {"fleet.kv_cache_tokens": 10_000_000},
            "matrix": {"policy.name": POLICIES, "seed": SEEDS},
        },
    ]
    plan = expand(experiments, root)
    results = root / "results"
    for planned in plan.runs:
        execute(load_config(root / planned.base, list(planned.overrides)), results)
    atomic_write_json(results / "work" / "plan.json", plan.to_json())
    data = load_study("tiers", results, None, results / "work" / "plan.json")
    return analyse(data, root / "figures", root), data


def test_section_has_every_setup_and_the_figures(section) -> None:
    s, _ = section
    text = "\n".join(s.blocks)
    for setup in (HBM_ONLY, "host 1 GiB", DISK_SETUP, CEILING):
        assert f"| {setup} |" in text
    assert len(s.figures) == 1  # TTFT p90 by capacity (the over-time one needs agentic-long)
    assert all(Path(f).is_file() for f in s.figures)
    assert s.answer.startswith("A 128 GiB") is False  # no 128 GiB setup here: not claimed
    assert "predicted_ttft is at least 15% below" in s.answer
    # One sentence of counts first, then a bullet per question with every setup's numbers.
    lead, rest = s.answer.split("\n\n", 1)
    assert "in 0 of 0" not in lead and " of " in lead and lead.endswith(".")
    assert rest.startswith("- **Routing with tiers.** predicted_ttft is at least 15% below")
    assert f"(paired over {len(SEEDS)} replicates, 95% intervals)" in s.answer  # as counted


def test_worst_setup_is_the_largest_difference_against_the_best_peer(section) -> None:
    """The finding line REPORT.md's headline reads for ours' worst tiered setup names the
    setup whose TTFT p90 difference against its best peer is the largest, with its value."""
    s, _ = section
    ours = [f for f in s.findings if f": {OURS} vs best peer " in f and HBM_ONLY not in f]
    worst = [f for f in s.findings if f.startswith(WORST_SETUP)]
    assert ours and len(worst) == 1

    def value(line: str) -> float:
        return float(line.split("TTFT p90: ")[1].split("%")[0])

    top = max(ours, key=value)
    assert value(worst[0]) == value(top)
    setup = top.split(f": {OURS} vs best peer")[0]  # "<cell>, <tier>"
    assert setup.rsplit(", ", 1)[1] in worst[0] and setup.rsplit(", ", 1)[0] in worst[0]


def test_token_shares_and_host_gain_recompute_from_records(section) -> None:
    s, data = section
    df = data.requests
    host = df.filter((pl.col("experiment") == "tiers_small_hi") & (pl.col("host_gib") == 1))
    hbm = df.filter((pl.col("experiment") == "tiers_small_hi") & (pl.col("host_gib") == 0))
    assert df["error"].null_count() == df.height  # every prompt fits the KV space
    # Tier fields exist only where a tier is on; the host tier serves some prompt tokens.
    assert hbm["host_tokens"].null_count() == hbm.height
    assert host["host_tokens"].fill_null(0).sum() > 0
    row = next(
        line
        for line in "\n".join(s.blocks).splitlines()
        if line.startswith("| host 1 GiB | sglang_cache_aware")
    )
    sg = host.filter(pl.col("policy") == "sglang_cache_aware")
    share = sg["host_tokens"].sum() / sg["input_tokens"].sum()
    assert f"/ {share * 100:.1f}% /" in row
    both = df.filter(
        (pl.col("experiment") == "tiers_small_hi") & (pl.col("policy") == "sglang_cache_aware")
    ).with_columns(pl.col("host_gib").cast(pl.Utf8).alias("tier"))
    gain = paired_compare(both, "0", "1", "ttft_p90", by="tier", pair_on=("replicate",))
    assert f"| {fmt_diff(gain)} |" in row


def test_cell_rows_are_the_tables_rows(section) -> None:
    """Scripts read the study's rows as data (`cell_rows`, e.g.
    benchmarks/tiers_agentic_seeds.py), not its markdown: each is a row of the section's
    tables, the best peer of a setup has the lowest pooled TTFT p90 among the peers, and only
    ours is compared with it."""
    s, data = section
    rows = cell_rows(simulated(data.requests))
    text = "\n".join(s.blocks)
    assert {r.tier for r in rows} == {HBM_ONLY, "host 1 GiB", DISK_SETUP, CEILING}
    for r in rows:
        assert "| " + " | ".join(r.cells().values()) + " |" in text
        peers = [x for x in rows if x.tier == r.tier and x.router != OURS]
        if r.tier == CEILING:
            assert r.best_peer is None
        else:
            assert r.best_peer == min(peers, key=lambda x: x.summary["ttft_p90"]).router
        assert (r.vs_peer is not None) == (r.router == OURS and r.tier != CEILING)
        assert (r.vs_hbm is not None) == (r.tier not in (HBM_ONLY, CEILING))
        hbm_peers = [x for x in rows if x.tier == HBM_ONLY and x.router != OURS]
        assert r.best_hbm_only_peer == min(hbm_peers, key=lambda x: x.summary["ttft_p90"]).router


def test_answer_names_setups_with_identical_results_once() -> None:
    from agentic_kvc.analysis.studies.tiers import _setups
    from agentic_kvc.paired import PairedResult

    def res(rel: float) -> PairedResult:
        return PairedResult(
            "ttft_p90", "peer", "ours", 1.0, 1.0 + rel, rel, rel - 0.1, rel + 0.1, 5, 100
        )

    same = res(0.16)
    rows = [
        ("trace x2", "host 16 GiB", "sticky", same, None),
        ("trace x2", "host 128 GiB", "sticky", res(0.16), None),  # equal values: one result
        ("trace x2", DISK_SETUP, "sticky", res(0.20), None),  # another result
        ("other", "host 16 GiB", "sticky", same, None),  # another cell: named apart
    ]
    text = _setups(rows, with_peer=True)
    assert text == (
        "trace x2, host 16 GiB / host 128 GiB vs sticky (identical results); "
        f"trace x2, {DISK_SETUP} vs sticky; other, host 16 GiB vs sticky"
    )
    assert _setups(rows[:1], with_peer=False) == "trace x2, host 16 GiB"
    # with e2e, the E2E comparison decides what is identical (here both differ)
    e2e_rows = [(c, t, p, same, res(0.01 * k)) for k, (c, t, p, *_) in enumerate(rows[:2])]
    assert _setups(e2e_rows, with_peer=False, e2e=True) == (
        "trace x2, host 16 GiB; trace x2, host 128 GiB"
    )


def test_the_narrower_reading_compares_ours_with_the_better_pricing_peer(section) -> None:
    """Beside the best of all peers, the answer compares ours with the better of the peers
    that price tiers (here dynamo_kv alone), setup by setup, from the same runs."""
    s, data = section
    rows = cell_rows(simulated(data.requests))
    ours = [r for r in rows if r.router == OURS and r.tier not in (HBM_ONLY, CEILING)]
    assert ours and all(r.pricing_peer == "dynamo_kv" for r in ours)
    for r in ours:
        at = simulated(data.requests).filter(pl.col("tier") == r.tier)
        got = paired_compare(at, "dynamo_kv", OURS, "ttft_p90", by="policy", pair_on=("replicate",))
        assert r.vs_pricing is not None and r.vs_pricing.rel_diff == got.rel_diff
    bullet = next(b for b in s.answer.split("\n") if "peers that price tiers" in b)
    assert "below the better one's TTFT p90 (significantly) in" in bullet
    assert f"of {len(ours)} setups" in bullet
