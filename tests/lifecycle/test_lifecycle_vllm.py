"""The lifecycle runner on real vLLM (CPU, tiny model, NIXL, the logging connector).

Slow: two engines start (about 75 s on a quiet machine). Run it with
`flock /tmp/akvc_vllm.lock flock /tmp/akvc_cpu.lock .venv/bin/python -m pytest -m "vllm and slow"
tests/lifecycle`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_kvc.lifecycle.runner import Grid, run_grid

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
BLOCK = 32


def test_pd_records_observe_every_point_and_pull_only_the_new_blocks(
    tiny_model: Path, tmp_path: Path
) -> None:
    grid = Grid("t", [0, 512], [256], [4], reps=1, warmup=1)
    meta = run_grid(grid, tmp_path, block=BLOCK)
    assert meta["records"] == 2
    bytes_by_c = {}
    for c in (0, 512):
        rec = json.loads((tmp_path / f"C{c}_N256_O4_rep0.json").read_text())
        bd, td = rec["breakdown_ms"], rec["transfer_detail"]
        assert bd["unobserved"] == [], bd
        assert bd["negative_phases"] == []
        assert bd["residual_frac"] < 0.05
        # D found the prefix in its own cache and pulled only the rest (the metrics agree).
        assert td["d_local_hit_tokens"] == c
        assert td["d_metrics_external_kv_transfer"] == 256
        assert td["blocks"] == 256 // BLOCK
        assert rec["output_tokens"] == {"pd": 4, "colo": 4}
        bytes_by_c[c] = td["bytes"]
    assert bytes_by_c[0] == bytes_by_c[512] > 0
    assert (tmp_path / "summary.csv").read_text().count("\n") == 3
