"""The decider comparison in the simulator: per-request output and paired intervals over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from agentic_kvc.analysis.studies import lifecycle
from agentic_kvc.lifecycle import decider_sim

from .test_analysis import _record


def test_decider_sim_pairs_calibrated_with_each_threshold_over_seeds(tmp_path: Path) -> None:
    out = tmp_path / "lifecycle" / "decider_sim.jsonl"
    rows = decider_sim.run(out, rates=(0.5,), seeds=(0, 1), sessions=20)
    assert {(r["variant"], r["seed"]) for r in rows} == {
        (v, s) for v in ("threshold_256", "threshold_2048", "calibrated") for s in (0, 1)
    }
    reqs = pl.read_parquet(decider_sim.requests_path(out))
    # Every summary row's request count is the number of its request rows.
    for r in rows:
        sel = reqs.filter((pl.col("variant") == r["variant"]) & (pl.col("seed") == r["seed"]))
        assert sel.height == r["requests"] > 0
    pairs = decider_sim.paired_rows(reqs, n_boot=200)
    assert [p["baseline"] for p in pairs] == ["threshold_256", "threshold_2048"]
    cal = reqs.filter(pl.col("variant") == "calibrated").get_column("ttft_s").to_numpy()
    for p in pairs:
        assert p["candidate"] == "calibrated" and p["n_pairs"] == 2
        # The candidate's value is TTFT p90 over both seeds' requests pooled.
        assert np.isclose(p["candidate_value"], np.quantile(cal, 0.9))
        assert p["ci_low"] <= p["rel_diff"] <= p["ci_high"]
    table = decider_sim.paired_table(reqs, pairs=pairs)
    assert len(table) == 1 and len(table[0]) == len(decider_sim.PAIRED_HEADER)

    # The lifecycle section (records in lifecycle/default) picks the comparison up.
    rec_dir = out.parent / "default"
    rec_dir.mkdir()
    for c in (0, 512):
        for n, size in ((256, 262144), (2048, 2097152)):
            r = _record(c, n, 0, 2.0, size, colo_ttft=5.0)
            (rec_dir / f"C{c}_N{n}_O1_rep0.json").write_text(json.dumps(r))
    s = lifecycle.analyse(rec_dir)
    assert "| cal vs 256 | cal vs 2048 | seeds |" in s.markdown()
    found = [f for f in s.findings if f.startswith("Lifecycle decider")]
    assert len(found) == 2 and all("[" in f for f in found)


def test_fit_quality_says_whether_the_transfer_fit_can_feed_the_decider() -> None:
    sizes = [(n, n * 1024) for n in (128, 256, 512, 1024, 2048, 3072)]
    rng = np.random.default_rng(0)

    def recs(noise_ms: float, colo_ms: float) -> list[dict]:
        out = []
        for rep in range(3):
            for n, b in sizes:
                t = 0.5 + b / 1e6 + abs(rng.normal(0, noise_ms))
                out.append(_record(0, n, rep, t, b, colo_ttft=colo_ms + 0.1 * n))
        return out

    clean = lifecycle.fit_quality(recs(0.01, 100.0))
    assert clean is not None and clean["sizes"] == 6
    assert clean["r2"] > 0.95 and clean["feeds_decider"]
    # Noise of ~20 ms against a 20 ms colocated prefill: R^2 low, error above the 10% margin.
    noisy = lifecycle.fit_quality(recs(20.0, 7.0))
    assert noisy is not None and noisy["r2"] < 0.95 and not noisy["feeds_decider"]
    assert noisy["p95_abs_residual_ms"] > 0.1 * noisy["colo_ttft_at_n_min_ms"]
    # The same noise next to a 10 s colocated prefill cannot flip a decision.
    assert lifecycle.fit_quality(recs(20.0, 10_000.0))["feeds_decider"]
