"""Tables from records equal the same statistics computed directly with numpy."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from agentic_kvc.analysis.load import find_runs, requests_frame, samples_frame
from agentic_kvc.analysis.tables import (
    latency_summary,
    route_class_summary,
    token_load_per_instance,
    token_load_summary,
)
from agentic_kvc.io import read_jsonl


def test_find_runs_reads_complete_fresh_and_archived_only(tree) -> None:  # type: ignore[no-untyped-def]
    runs = find_runs(tree.results, tree.archive)
    ids = [r.run_id for r in runs]
    assert tree.broken_id not in ids
    assert tree.archived_id in ids and len(ids) == 2
    assert {r.run_id: r.source for r in runs}[tree.archived_id] == "archive"
    assert find_runs(tree.results, tree.archive, [tree.archived_id])[0].run_id == tree.archived_id
    assert [r.run_id for r in find_runs(tree.results)] == [i for i in ids if i != tree.archived_id]


def test_fresh_run_wins_over_archived_copy(tree) -> None:  # type: ignore[no-untyped-def]
    import shutil

    shutil.copytree(tree.archive / tree.archived_id, tree.results / "runs" / tree.archived_id)
    got = {r.run_id: r.source for r in find_runs(tree.results, tree.archive)}
    assert got[tree.archived_id] == "runs"


def test_latency_summary_matches_numpy_and_summary_json(tree) -> None:  # type: ignore[no-untyped-def]
    runs = find_runs(tree.results, tree.archive)
    df = requests_frame(runs, tree.plan)
    table = latency_summary(df, ["run_id"])
    for run in runs:
        records = list(read_jsonl(run.path / "requests.jsonl"))
        row = table.filter(pl.col("run_id") == run.run_id).row(0, named=True)
        ok = [r for r in records if not r["error"]]
        assert row["requests"] == len(records)
        assert row["errors"] == len(records) - len(ok)
        for lat in ("ttft_s", "tpot_s", "e2e_s"):
            vals = np.array([r[lat] for r in ok if r[lat] is not None])
            for p in (50, 90, 99):
                assert row[f"{lat}_p{p}"] == pytest.approx(np.percentile(vals, p), rel=1e-12)
            assert row[f"{lat}_mean"] == pytest.approx(vals.mean(), rel=1e-12)
        hit = sum(r["cached_tokens"] for r in ok) / sum(r["input_tokens"] for r in ok)
        assert row["prefix_hit_rate"] == pytest.approx(hit)
        summary = json.loads((run.path / "summary.json").read_text())["overall"]
        assert row["ttft_s_p99"] == pytest.approx(summary["ttft_s"]["p99"])
        assert row["prefix_hit_rate"] == pytest.approx(summary["prefix_hit_rate"])


def test_labels_come_from_the_plan(tree) -> None:  # type: ignore[no-untyped-def]
    df = requests_frame(find_runs(tree.results, tree.archive), tree.plan)
    assert set(df["experiment"]) == {"exp"}
    assert set(df["variant"]) == {"round_robin"}  # seeds pooled into one variant
    assert set(df["backend"]) == {"sim"} and set(df["instances"]) == {3}
    unplanned = requests_frame(find_runs(tree.results, tree.archive))
    assert set(unplanned["experiment"]) == {"(unplanned)"}


def test_route_class_shares_sum_to_one(tree) -> None:  # type: ignore[no-untyped-def]
    df = requests_frame(find_runs(tree.results, tree.archive), tree.plan)
    rc = route_class_summary(df, ["variant"])
    assert rc["share"].sum() == pytest.approx(1.0)
    assert rc["requests"].sum() == df.height
    counts = df.group_by("route_class").len()
    for row in counts.iter_rows(named=True):
        got = rc.filter(pl.col("route_class") == row["route_class"])["requests"].item()
        assert got == row["len"]


def test_token_load_counts_idle_instances(tree) -> None:  # type: ignore[no-untyped-def]
    df = requests_frame(find_runs(tree.results, tree.archive), tree.plan)
    # Pretend instance 2 of one run got nothing: its work moves to instance 0.
    rid = df["run_id"][0]
    moved = df.with_columns(
        pl.when((pl.col("run_id") == rid) & (pl.col("prefill_instance") == 2))
        .then(0)
        .otherwise(pl.col("prefill_instance"))
        .alias("prefill_instance")
    )
    per = token_load_per_instance(moved)
    assert per.filter(pl.col("run_id") == rid).height == 3
    summ = token_load_summary(per).filter(pl.col("run_id") == rid).row(0, named=True)
    assert summ["tokens_min"] == 0 and summ["max_over_min"] is None
    ok = moved.filter((pl.col("run_id") == rid) & pl.col("error").is_null())
    expected = (ok["input_tokens"] - ok["cached_tokens"]).sum()
    assert summ["tokens_total"] == expected


def test_empty_inputs_give_empty_frames(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert find_runs(tmp_path / "nothing") == []
    df = requests_frame([])
    assert df.height == 0 and "variant" in df.columns
    assert samples_frame([]).height == 0
    assert latency_summary(df, ["variant"]).height == 0


def test_bad_record_names_the_file(tree) -> None:  # type: ignore[no-untyped-def]
    run = find_runs(tree.results, tree.archive)[0]
    (run.path / "requests.jsonl").write_text('{"input_tokens": "lots"}\n')
    with pytest.raises(ValueError, match=r"requests\.jsonl"):
        requests_frame([run])


def test_sim_vs_real_pairs_twins_and_computes_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from foundation.fake_run_backend import CountingFakeBackend

    from agentic_kvc.analysis.tables import sim_vs_real
    from agentic_kvc.config import load_config
    from agentic_kvc.io import atomic_write_jsonl
    from agentic_kvc.runs import execute

    base = {"workload": {"generator": {"sessions": 6}}, "fleet": {"instances": 2}}
    backend = CountingFakeBackend()
    results = tmp_path / "results"
    real = execute(load_config(base, ["backend=vllm"]), results, backend)
    sim = execute(load_config(base, ["backend=sim"]), results, backend)
    # An unpaired simulated run (another seed): it has no real twin, so no row.
    execute(load_config(base, ["backend=sim", "seed=5"]), results, backend)
    # The simulator "overestimates" TTFT by half (same records otherwise).
    recs = list(read_jsonl(sim / "requests.jsonl"))
    for r in recs:
        if r["ttft_s"] is not None:
            r["ttft_s"] *= 1.5
    atomic_write_jsonl(sim / "requests.jsonl", recs)

    table = sim_vs_real(requests_frame(find_runs(results)))
    assert table.height == 1
    row = table.row(0, named=True)
    assert (row["run_id"], row["run_id_sim"]) == (real.name, sim.name)
    ttft = [r["ttft_s"] for r in read_jsonl(real / "requests.jsonl") if not r["error"]]
    assert row["ttft_s_p90"] == pytest.approx(np.percentile(ttft, 90))
    assert row["ttft_s_p50_rel_err"] == pytest.approx(0.5)
    assert row["e2e_s_p90_rel_err"] == pytest.approx(0.0)
    assert row["prefix_hit_rate_diff"] == pytest.approx(0.0)
