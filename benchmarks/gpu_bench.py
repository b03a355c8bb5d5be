"""What the GPU benchmarks (kv_link_copy.py, kv_link_contention.py) share: PyTorch with a
CUDA device, or one line saying which is missing (the scripts then exit 2), and the
environment fields every result JSON records.

Imported by bare name (`from gpu_bench import ...`): the scripts run with this folder first
on `sys.path` (agentic_kvc.bench_scripts). torch is imported only when asked for, so a
script's `--help` works on a machine without it.
"""

from __future__ import annotations

import platform
import sys
from typing import Any


def cuda_torch(script: str) -> tuple[Any, Any] | None:
    """(the torch module, the CUDA device), or None after printing to stderr, as `script`,
    why this machine cannot run a GPU benchmark (no PyTorch, or no CUDA device)."""
    try:
        import torch
    except ImportError:
        print(f"{script}: needs PyTorch with CUDA (PyTorch is not installed)", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{script}: no CUDA device here (this benchmark needs a GPU host)", file=sys.stderr)
        return None
    return torch, torch.device("cuda")


def environment(torch: Any) -> dict[str, Any]:
    """The device, torch and CUDA versions and the host platform, for a result's JSON."""
    return {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.platform(),
    }
