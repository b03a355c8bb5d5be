"""The named lifecycle grids: the seeds' GPU grid holds the design's values, every cell runs."""

from __future__ import annotations

from click.testing import CliRunner

from agentic_kvc.lifecycle.cli import lifecycle
from agentic_kvc.lifecycle.grids import GRIDS


def test_gpu_grid_is_the_seeds_grid() -> None:
    g = GRIDS["gpu"]
    k = 1024
    assert g.cs == [0, 4 * k, 16 * k, 32 * k, 64 * k, 100 * k]
    assert g.ns == [512, 1 * k, 2 * k, 4 * k, 8 * k, 16 * k, 32 * k]
    assert g.os == [1, 32, 128, 512]
    assert g.reps == 5
    assert g.device == "cuda" and g.model != "tiny"
    cells = list(g.cells())
    # No cell dropped by the context limit: the largest (100k + 32k + 512) fits.
    assert len(cells) == 6 * 7 * 4 == len(set(cells))
    assert (100 * k, 32 * k, 512) in cells


def test_cpu_grids_stay_on_the_tiny_model() -> None:
    for name in ("default", "smoke", "cpu"):
        assert (GRIDS[name].model, GRIDS[name].device) == ("tiny", "cpu")


def test_cli_names_the_gpu_grid_and_rejects_unknown() -> None:
    runner = CliRunner()
    help_text = runner.invoke(lifecycle, ["run", "--help"]).output
    assert "gpu" in help_text and "--model" in help_text
    bad = runner.invoke(lifecycle, ["run", "--grid", "nope"])
    assert bad.exit_code != 0 and "unknown grid" in bad.output
