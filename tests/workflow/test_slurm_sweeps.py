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
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner
from test_snakemake_pipeline import snakemake

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


def _robustness():
    spec = importlib.util.spec_from_file_location(
        "policy_robustness", REPO / "benchmarks" / "policy_robustness.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("policy_robustness", mod)
    spec.loader.exec_module(mod)
    return mod


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
    rb = _robustness()

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
        assert res["gpu"] == "2" and res["real_engine"] == "1"
        assert int(res["runtime"]) >= 60 and int(res["mem_mb"]) >= 64000
    assert [r for r, _, _ in jobs].count("lifecycle_gpu_grid") == 1


def test_lifecycle_run_rejects_a_c_outside_its_grid() -> None:
    out = CliRunner().invoke(lifecycle, ["run", "--grid", "gpu", "--c", "7", "--out", "/x"])
    assert out.exit_code == 2
    assert "--c" in out.output and "[7]" in out.output
