"""A fixed engine profile for simulator tests, so they do not depend on any calibration's
current numbers (imported as `from fixed_profile import PROFILE`, like block_pool_ref)."""

from agentic_kvc.profiles.cost import AffineStepCost, EngineProfile

PROFILE = EngineProfile(
    "test",
    "test",
    AffineStepCost(overhead_s=0.004, per_token_s=2e-6, per_attn_pair_s=1e-10, per_kv_token_s=1e-8),
    kv_bytes_per_token=1024,
    kv_capacity_tokens=16384,
    source="tests/sim",
)
