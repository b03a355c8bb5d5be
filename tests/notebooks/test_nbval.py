"""Every notebook runs top to bottom under nbval (lax) on the project's kernel, over a small
simulated results tree, with the parameters the pipeline's papermill passes; the exploratory
notebook's comparison is the paired statistics' own, and it says so when there are no runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from agentic_kvc.analysis.load import open_runs, requests_frame
from agentic_kvc.paired import paired_compare

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))
KERNEL = "akvc"  # registered in .venv by `make jupyter` (a prerequisite of `make test`)


def _has_kernel() -> bool:
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL in KernelSpecManager().find_kernel_specs()


def _prepare(notebook: Path, results: Path, out: Path) -> Path:
    """The notebook as .ipynb with papermill's injected parameters, not executed."""
    import jupytext
    import papermill

    ipynb = out / f"{notebook.stem}.ipynb"
    jupytext.write(jupytext.read(notebook), ipynb)
    papermill.execute_notebook(
        str(ipynb),
        str(ipynb),
        parameters={
            "results_dir": str(results),
            "archive_dir": str(results / "archive"),
            "plan_path": str(results / "work" / "plan.json") if results.is_dir() else "",
            "tables_dir": str(out / "tables" / notebook.stem),
            "figures_dir": str(out / "figures" / notebook.stem),
        },
        prepare_only=True,
        progress_bar=False,
    )
    return ipynb


@pytest.fixture(scope="module")
def nbval_run(
    sim_results: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("nbval_out")
    ipynbs = [_prepare(nb, sim_results, out) for nb in NOTEBOOKS]
    # Its own ini file keeps the project's pytest options (testpaths, markers) out of this run.
    (out / "pytest.ini").write_text("[pytest]\n")
    kernel = [f"--nbval-kernel-name={KERNEL}"] if _has_kernel() else ["--nbval-current-env"]
    t0 = time.monotonic()
    args = ["-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-cell-timeout=300", *kernel]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, *map(str, ipynbs)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(f"nbval over {len(ipynbs)} notebooks: {time.monotonic() - t0:.1f} s")
    return proc, out


def test_every_notebook_passes_nbval(
    nbval_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    import nbformat

    proc, out = nbval_run
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    # nbval makes one test of each code cell: all of them ran, none was skipped.
    cells = sum(
        c.cell_type == "code"
        for nb in NOTEBOOKS
        for c in nbformat.read(out / f"{nb.stem}.ipynb", as_version=4).cells
    )
    assert proc.stdout.splitlines()[-1].startswith(f"{cells} passed"), proc.stdout[-3000:]


def test_explore_compares_the_first_two_variants(
    nbval_run: tuple[subprocess.CompletedProcess[str], Path], sim_results: Path
) -> None:
    _, out = nbval_run
    table = pl.read_csv(out / "tables" / "explore" / "paired.csv")
    runs, plan = open_runs(sim_results, sim_results / "archive", sim_results / "work" / "plan.json")
    assert len(runs) == 5  # the unplanned, incomplete run is not read
    # The notebook compared within the experiment (and backend) with the most variants.
    requests = requests_frame(runs, plan).filter(pl.col("experiment") == "tiny_policies")
    assert table["baseline"].unique().to_list() == ["lmetric"]
    assert table["candidate"].unique().to_list() == ["round_robin"]
    assert table["metric"].to_list() == ["ttft_p50", "ttft_p90", "e2e_p90", "hit_rate"]
    for row in table.iter_rows(named=True):
        want = paired_compare(requests, "lmetric", "round_robin", row["metric"])
        assert want.n_pairs == row["n_pairs"] == 2
        for field in ("baseline_value", "candidate_value", "rel_diff", "ci_low", "ci_high"):
            assert row[field] == pytest.approx(getattr(want, field), rel=1e-9), field
    for name in ("session_timeline.png", "instances_over_time.png"):
        assert (out / "figures" / "explore" / name).is_file()


def test_explore_says_so_when_there_are_no_runs(tmp_path: Path) -> None:
    import papermill

    empty = tmp_path / "results"
    ipynb = _prepare(REPO / "notebooks" / "explore.py", empty, tmp_path)
    done = papermill.execute_notebook(
        str(ipynb), str(tmp_path / "explore.out.ipynb"), kernel_name="python3", progress_bar=False
    )
    text = json.dumps([c.get("outputs", []) for c in done.cells])
    assert "No complete runs under" in text
    assert not (tmp_path / "tables" / "explore" / "paired.csv").exists()


@pytest.mark.skipif(not _has_kernel(), reason="no `akvc` kernel (run `make jupyter`)")
def test_akvc_kernel_is_the_venv_python_in_the_repo_root(tmp_path: Path) -> None:
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name=KERNEL, cwd=str(tmp_path))
    try:
        seen: list[str] = []
        kc.execute_interactive(
            "import os, sys, agentic_kvc; print(os.getcwd()); print(sys.prefix)",
            output_hook=lambda m: seen.append(m["content"].get("text", "")),
            timeout=60,
        )
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    cwd, prefix = "".join(seen).split()
    assert Path(cwd) == REPO
    assert Path(prefix) == Path(sys.prefix)


def test_every_notebook_opens_on_the_akvc_kernel() -> None:
    """Lab starts the kernel a notebook names: only `akvc` starts in the repository root, where
    the default parameters (results/...) point."""
    import jupytext

    for path in NOTEBOOKS:
        assert jupytext.read(path).metadata["kernelspec"]["name"] == KERNEL, path.name
