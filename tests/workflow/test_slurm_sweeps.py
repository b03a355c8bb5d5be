"""Sweeps as pipeline targets (workflow/rules/sweeps.smk), planned through the slurm profile.

A dry run (no cluster): the robustness sweep is one job per (scenario, seed) of
benchmarks/policy_robustness.py, the misspecification sweep one per (scenario, seed) of its
default set, each waiting for the robustness batch of the same (scenario, seed); the lifecycle
GPU grid one job per C of lifecycle/grids.py, each declaring two GPUs. The job counts come from
the scripts and the grid, so a scenario or C added there is a job more here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from test_snakemake_pipeline import snakemake

from agentic_kvc.bench_scripts import load_benchmark
from agentic_kvc.lifecycle.cli import lifecycle
from agentic_kvc.lifecycle.grids import GRIDS

REPO = Path(__file__).resolve().parents[2]
CONFIG = {
    "results": "results",
    "archive": "results/archive",
    "select_tags": [],
    "notebooks": [],
    "experiments": [
        {"name": "one", "base": "config/runs/sim_h20_agentic.yaml", "matrix": {"seed": [0]}}
    ],
    "bench": {"scripts": {}},
}


def _jobs(log: str) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(rule, wildcards, resources) of each job block of a dry run's output."""
    out = []
    for block in re.split(r"\n\[[^\]]+\]\n", log):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if not m:
            continue

        def field(name: str, block: str = block) -> dict[str, str]:
            f = re.search(rf"^\s+{name}: (.*)$", block, re.M)
            return dict(kv.split("=", 1) for kv in f.group(1).split(", ")) if f else {}

        out.append((m.group(1), field("wildcards"), field("resources")))
    return out


def test_sweeps_plan_one_slurm_job_per_batch(pipeline: Path) -> None:
    (pipeline / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    # Scenarios replaying public traces read ../shared/traces: present (empty) for the plan.
    traces = pipeline.parent / "shared" / "traces"
    traces.mkdir(parents=True)
    for name in ("mooncake_conversation_trace.jsonl", "tracelab_multi_session_sample.csv"):
        (traces / name).touch()
    out = snakemake(
        pipeline,
        "--profile",
        "workflow/profiles/slurm",
        "-n",
        "robustness_sweep",
        "misspec_sweep",
        "lifecycle_gpu_grid",
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    jobs = _jobs(out.stdout + out.stderr)
    rb = load_benchmark("policy_robustness")

    batches = {
        (w["sweep"], w["scenario"], int(w["seed"])) for r, w, _ in jobs if r == "sweep_batch"
    }
    want = {("robustness", sc, s) for sc in rb.SCENARIOS for s in range(rb.REPLICATES.get(sc, 5))}
    misspec = ["chat", "heavy_tail", "short_ctx", "high_reuse", "long_fleet16", "h100_qwen"]
    want |= {("misspec", sc, s) for sc in misspec for s in range(3)}
    assert batches == want
    assert sum(r == "sweep_batch" for r, _, _ in jobs) == len(want)  # one job each
    for rule, w, res in jobs:
        if rule == "sweep_batch":
            assert res["cpus_per_task"] == "1", w
            assert int(res["mem_mb"]) >= 4000, w

    parts = {int(w["c"]): res for r, w, res in jobs if r == "lifecycle_gpu_part"}
    assert sorted(parts) == GRIDS["gpu"].cs
    for res in parts.values():
        assert res["gpu"] == "2" and res["machine"] == "1000"
        assert int(res["runtime"]) >= 60 and int(res["mem_mb"]) >= 64000
    assert [r for r, _, _ in jobs].count("lifecycle_gpu_grid") == 1


def test_lifecycle_run_rejects_a_c_outside_its_grid() -> None:
    out = CliRunner().invoke(lifecycle, ["run", "--grid", "gpu", "--c", "7", "--out", "/x"])
    assert out.exit_code == 2
    assert "--c" in out.output and "[7]" in out.output


def _merge_script():
    spec = importlib.util.spec_from_file_location(
        "lifecycle_merge", REPO / "workflow" / "scripts" / "lifecycle_merge.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lifecycle_record(c: int, n: int, rep: int, transfer_ms: float) -> dict:
    """A hand-made record of one (C, N, O=1, rep): P, the transfer, D, as the runner writes."""
    from agentic_kvc.lifecycle import protocol

    ts = {k: v * 1_000_000 for k, v in {"t0": 0, "t1": 1, "t2": 2, "t3": 10, "tp": 11}.items()}
    ts |= {"t4": 12_000_000, "t5": 13_000_000}
    ts["t6"] = ts["t5"] + int(transfer_ms * 1e6)
    for i, k in enumerate(("t7", "t8", "t9", "t10")):
        ts[k] = ts["t6"] + (i + 1) * 1_000_000
    bd = protocol.breakdown(ts)
    bd["ttft_overhead_vs_colo"] = bd["ttft"] - 5.0
    detail = {"bytes": n * 1024, "blocks": n // 32, "d_local_hit_tokens": c}
    cfg = {"prior_context": c, "current_new_tokens": n, "output_length": 1, "rep": rep}
    return {
        "config": {**cfg, "block_size": 32},
        "timestamps_ns": ts,
        "breakdown_ms": bd,
        "transfer_detail": protocol.transfer_detail(detail, 2, bd),
        "colocated": {"breakdown_ms": {"ttft": 5.0}},
        "host": {"load1": 0.5},
    }


def test_lifecycle_parts_merge_into_one_grid(tmp_path: Path) -> None:
    import json

    import polars as pl

    merge = _merge_script().merge
    parts = []
    for c in (0, 512):
        part = tmp_path / "parts" / f"C{c}"
        part.mkdir(parents=True)
        for n in (256, 2048):
            for rep in range(2):
                rec = _lifecycle_record(c, n, rep, 1.0 + n / 1000)
                (part / f"C{c}_N{n}_O1_rep{rep}.json").write_text(json.dumps(rec))
        (part / "run.json").write_text(json.dumps({"wall_s": 10.0 + c}))
        parts.append(part)
    out = tmp_path / "gpu"
    doc = merge(parts, out)
    assert doc["records"] == 8
    assert [p["wall_s"] for p in doc["parts"]] == [10.0, 522.0]
    summary = pl.read_csv(out / "summary.csv")
    assert summary.height == 8
    assert sorted(set(summary["C"])) == [0, 512]
    assert json.loads((out / "calibration.json").read_text())["source"] == str(out)

    # A record two parts both hold is an error, not a silent overwrite.
    dup = tmp_path / "parts" / "dup"
    dup.mkdir()
    (dup / "C0_N256_O1_rep0.json").write_text((parts[0] / "C0_N256_O1_rep0.json").read_text())
    with pytest.raises(SystemExit, match=r"C0_N256_O1_rep0\.json is in both"):
        merge([*parts, dup], out)
