"""Each analysis notebook, executed with papermill over a tiny synthetic results tree, writes
its tables and figures, and the table numbers equal those computed directly from the records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from foundation.fake_run_backend import synthetic_run

from agentic_kvc.config import load_config
from agentic_kvc.io import atomic_write_json, read_jsonl
from agentic_kvc.runs import write_results

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))


def _make_run(results: Path, overrides: list[str]) -> str:
    """A run directory as any backend leaves it: records, samples, summary, complete manifest."""
    cfg = load_config(
        {
            "workload": {"generator": {"sessions": 4}},
            "fleet": {"instances": 3},
        },
        overrides,
    )
    run_dir = results / "runs" / cfg.run_id()
    records, samples = synthetic_run(cfg)
    write_results(run_dir, records, samples)
    atomic_write_json(run_dir / "config.json", cfg.canonical())
    atomic_write_json(
        run_dir / "manifest.json",
        {
            "run_id": cfg.run_id(),
            "config": cfg.canonical(),
            "backend": cfg.backend,
            "seed": cfg.seed,
            "complete": True,
        },
    )
    return cfg.run_id()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nb") / "results"
    for seed in (0, 1):
        _make_run(root, [f"seed={seed}"])
    # A real-engine run whose simulated twin is seed 0's run above.
    _make_run(root, ["seed=0", "backend=vllm"])
    # An incomplete run: the notebooks must not read it.
    broken = _make_run(root, ["seed=9"])
    manifest = root / "runs" / broken / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "complete": False}))
    return root


def _execute(notebook: Path, results: Path, out: Path) -> tuple[Path, Path]:
    import jupytext
    import papermill

    ipynb = out / f"{notebook.stem}.ipynb"
    jupytext.write(jupytext.read(notebook), ipynb)
    tables, figures = out / "tables", out / "figures"
    papermill.execute_notebook(
        str(ipynb),
        str(out / f"{notebook.stem}.out.ipynb"),
        parameters={
            "results_dir": str(results),
            "archive_dir": str(results / "archive"),
            "plan_path": "",
            "tables_dir": str(tables),
            "figures_dir": str(figures),
        },
        kernel_name="python3",
        progress_bar=False,
    )
    return tables, figures


def _complete_records(results: Path) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for run_dir in sorted((results / "runs").iterdir()):
        if json.loads((run_dir / "manifest.json").read_text())["complete"]:
            out[run_dir.name] = list(read_jsonl(run_dir / "requests.jsonl"))
    return out


def test_every_notebook_has_a_tagged_parameters_cell() -> None:
    import jupytext

    assert {p.stem for p in NOTEBOOKS} >= {"latency_by_policy", "load_balance"}
    for path in NOTEBOOKS:
        nb = jupytext.read(path)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, path
        for name in ("results_dir", "tables_dir", "figures_dir", "plan_path", "archive_dir"):
            assert f"{name} =" in tagged[0].source, (path, name)


def test_latency_by_policy(results: Path, tmp_path: Path) -> None:
    tables, figures = _execute(REPO / "notebooks" / "latency_by_policy.py", results, tmp_path)
    assert {p.name for p in figures.glob("*.png")} >= {"latency_percentiles.png", "ttft_ecdf.png"}
    by_run = pl.read_csv(tables / "latency_by_run.csv")
    runs = _complete_records(results)
    assert sorted(by_run["run_id"]) == sorted(runs)
    for run_id, recs in runs.items():
        row = by_run.filter(pl.col("run_id") == run_id).row(0, named=True)
        ok = [r for r in recs if not r["error"]]
        assert row["requests"] == len(recs) and row["errors"] == len(recs) - len(ok)
        for lat in ("ttft_s", "tpot_s", "e2e_s"):
            vals = [r[lat] for r in ok if r[lat] is not None]
            for p in (50, 90, 99):
                assert row[f"{lat}_p{p}"] == pytest.approx(np.percentile(vals, p), rel=1e-9)
    # Seeds pooled per variant: one round_robin row over every complete record.
    by_variant = pl.read_csv(tables / "latency_by_variant.csv")
    pooled = [r["e2e_s"] for recs in runs.values() for r in recs if not r["error"]]
    assert by_variant.height == 1
    assert by_variant["e2e_s_p90"][0] == pytest.approx(np.percentile(pooled, 90), rel=1e-9)
    by_class = pl.read_csv(tables / "latency_by_route_class.csv")
    all_recs = [r for recs in runs.values() for r in recs]
    for cls in {r["route_class"] for r in all_recs}:
        n = sum(r["route_class"] == cls for r in all_recs)
        assert by_class.filter(pl.col("route_class") == cls)["requests"].item() == n


def test_load_balance(results: Path, tmp_path: Path) -> None:
    tables, figures = _execute(REPO / "notebooks" / "load_balance.py", results, tmp_path)
    assert (figures / "token_load_per_instance.png").is_file()
    assert (figures / "running_over_time.png").is_file()
    summary = pl.read_csv(tables / "token_load_summary.csv")
    runs = _complete_records(results)
    assert sorted(summary["run_id"]) == sorted(runs)
    for run_id, recs in runs.items():
        per = [0, 0, 0]
        for r in recs:
            if not r["error"]:
                per[r["prefill_instance"]] += r["input_tokens"] - r["cached_tokens"]
        row = summary.filter(pl.col("run_id") == run_id).row(0, named=True)
        assert (row["tokens_max"], row["tokens_min"]) == (max(per), min(per))
        assert row["max_over_min"] == pytest.approx(max(per) / min(per))
    samples = pl.read_csv(tables / "instance_samples_summary.csv")
    assert samples.height == 3 * len(runs)
    assert (samples["samples"] == 3).all()


def test_sim_vs_real(results: Path, tmp_path: Path) -> None:
    tables, figures = _execute(REPO / "notebooks" / "sim_vs_real.py", results, tmp_path)
    assert (figures / "sim_vs_real_latency.png").is_file()
    table = pl.read_csv(tables / "sim_vs_real.csv")
    manifests = {
        d.name: json.loads((d / "manifest.json").read_text()) for d in (results / "runs").iterdir()
    }
    real = [k for k, m in manifests.items() if m["backend"] == "vllm"]
    twin = [k for k, m in manifests.items() if m["backend"] == "sim" and m["seed"] == 0]
    assert table["run_id"].to_list() == real and table["run_id_sim"].to_list() == twin
    ttft = [r["ttft_s"] for r in _complete_records(results)[real[0]] if not r["error"]]
    assert table["ttft_s_p90"][0] == pytest.approx(np.percentile(ttft, 90), rel=1e-9)
