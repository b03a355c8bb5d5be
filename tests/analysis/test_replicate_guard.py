"""Plan-time guard: a simulated experiment's replicates must be able to differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agentic_kvc.analysis.experiments import expand
from agentic_kvc.config import ConfigError, load_config
from agentic_kvc.sim.run_backend import prepare_sim, profile_for, seed_uses
from agentic_kvc.workload import synthesize, write_native


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_native(synthesize("agentic-coding", 6, seed=1), tmp_path / "w.jsonl")
    for name, workload in (
        ("trace.yaml", {"trace": str(tmp_path / "w.jsonl")}),
        ("gen.yaml", {"generator": {"sessions": 3}}),
    ):
        base = {"backend": "sim", "workload": workload, "fleet": {"instances": 2}}
        (tmp_path / name).write_text(yaml.safe_dump(base))
    return tmp_path


def _exp(base: str, **kw: Any) -> dict[str, Any]:
    return {"name": "cell", "base": base, **kw}


def test_trace_seeds_alone_are_refused_naming_the_experiment(root: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        expand([_exp("trace.yaml", matrix={"policy.name": ["round_robin"], "seed": [0, 1]})], root)
    msg = str(exc.value)
    assert "experiment 'cell'" in msg and "(seed=0) and (seed=1)" in msg
    assert "session_jitter_s" in msg


def test_simulated_repeats_are_refused_real_ones_pass(root: Path) -> None:
    with pytest.raises(ConfigError, match=r"\(repeat=0\) and \(repeat=1\)"):
        expand([_exp("gen.yaml", matrix={"repeat": [0, 1]})], root)
    plan = expand([_exp("gen.yaml", set={"backend": "vllm"}, matrix={"repeat": [0, 1]})], root)
    assert len(plan.run_ids()) == 2


@pytest.mark.parametrize(
    ("base", "extra"),
    [
        ("gen.yaml", {}),  # the generator draws from the seed
        ("trace.yaml", {"workload.session_jitter_s": 0.5}),
        # cpu-tiny's profile delays each request's ingress by a seeded draw per neighbour
        ("trace.yaml", {"sim.host_neighbour_threads": 1.0}),
        ("trace.yaml", {}),  # no seed in the matrix: nothing to replicate
    ],
)
def test_replicates_that_differ_pass(root: Path, base: str, extra: dict[str, Any]) -> None:
    matrix = {"seed": [0, 1, 2]} if base == "gen.yaml" or extra else {"policy.name": ["lmetric"]}
    plan = expand([_exp(base, set=extra, matrix=matrix)], root)
    assert len(plan.run_ids()) == len(next(iter(matrix.values())))


def test_neighbours_without_a_background_delay_leave_the_seed_unused(root: Path) -> None:
    h20 = {
        "fleet.hardware": "h20",
        "fleet.model": "qwen3-coder-30b-a3b",
        "sim.host_neighbour_threads": 1.0,
    }
    with pytest.raises(ConfigError, match="same simulation"):
        expand([_exp("trace.yaml", set=h20, matrix={"seed": [0, 1]})], root)


def test_seed_uses_is_exact_in_the_simulator(root: Path) -> None:
    """Where `seed_uses` says nothing, two seeds give the same records; where it names a use,
    they differ (so the guard refuses only runs that are one run)."""

    def records(seed: int, *sets: str) -> list[dict[str, Any]]:
        cfg = load_config(root / "trace.yaml", [f"seed={seed}", *sets])
        return prepare_sim(cfg)(profile_for(cfg))

    cfg = load_config(root / "trace.yaml")
    assert seed_uses(cfg) == []
    assert records(0) == records(1)
    jitter = "workload.session_jitter_s=2.0"
    assert seed_uses(load_config(root / "trace.yaml", [jitter])) == ["workload.session_jitter_s"]
    assert records(0, jitter) != records(1, jitter)
    neighbours = "sim.host_neighbour_threads=2.0"
    assert records(0, neighbours) != records(1, neighbours)
