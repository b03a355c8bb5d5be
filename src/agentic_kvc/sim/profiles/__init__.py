"""Engine profiles by (hardware, model). PLACEHOLDER until the profiles work lands:
only `cpu-tiny`/`tiny` with guessed coefficients."""

from __future__ import annotations

from agentic_kvc.sim.cost import AffineStepCost, EngineProfile


def get_profile(hardware: str, model: str, gpu_memory_utilization: float = 0.9) -> EngineProfile:
    if (hardware, model) == ("cpu-tiny", "tiny"):
        cost = AffineStepCost(
            overhead_s=0.004, per_token_s=2e-6, per_attn_pair_s=1e-10, per_kv_token_s=1e-8
        )
        return EngineProfile(hardware, model, cost, 2 * 2 * 2 * 64 * 2, 16384, "placeholder")
    raise ValueError(f"no simulator profile for hardware={hardware!r} model={model!r}")
