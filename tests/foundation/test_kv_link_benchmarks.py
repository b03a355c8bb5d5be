"""The GPU link benchmarks (benchmarks/kv_link_*.py) on a machine without a GPU: `--help`
works without torch, the shared start (benchmarks/gpu_bench.py) says what is missing and the
scripts exit 2, and the copy benchmark's latency + bandwidth fit is right."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentic_kvc.bench_scripts import BENCHMARKS, load_benchmark

SCRIPTS = ("kv_link_copy", "kv_link_contention")


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_needs_no_torch(name: str) -> None:
    """`--help` runs before torch is imported (torch made unimportable here)."""
    code = (
        "import runpy, sys; sys.modules['torch'] = None; "
        f"sys.argv = [{str(BENCHMARKS / name)!r}, '--help']; "
        f"sys.path.insert(0, {str(BENCHMARKS)!r}); "
        f"runpy.run_path({str(BENCHMARKS / name) + '.py'!r}, run_name='__main__')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "--out" in out.stdout


@pytest.mark.parametrize("name", SCRIPTS)
@pytest.mark.parametrize("missing", ["torch", "cuda"])
def test_without_torch_or_cuda_the_scripts_exit_2(
    name: str, missing: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    if missing == "torch":
        monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    else:
        torch = pytest.importorskip("torch")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", [name, "--out", str(out)])
    assert load_benchmark(name).main() == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{name}: ")
    assert ("PyTorch is not installed" in err) == (missing == "torch")
    assert ("no CUDA device" in err) == (missing == "cuda")
    assert not out.exists()


def test_fit_affine_recovers_latency_and_bandwidth() -> None:
    fit_affine = load_benchmark("kv_link_copy").fit_affine
    sizes = [2.0**k * 1.5e6 for k in range(12)]
    times = [20e-6 + b / 50e9 for b in sizes]  # 20 us + bytes at 50 GB/s
    lat, bw = fit_affine(sizes, times)
    assert lat == pytest.approx(20e-6, rel=1e-6) and bw == pytest.approx(50e9, rel=1e-9)
    # a fit line through the origin's other side clamps the latency at 0
    assert fit_affine([1.0, 2.0], [0.5, 2.0])[0] == 0.0
