"""predicted_ttft's tier pricing (issue 29, item 4): a host or disk hit is priced by its reload
time over the candidate's link, behind the router's routed reloads, beyond the candidate's
queue; no tier below HBM leaves every decision as it was."""

from __future__ import annotations

import random

import pytest
from policy_helpers import FixedCache, req
from test_tier_policies import FixedTiers, _fleet

from agentic_kvc.config import KVTiersConfig
from agentic_kvc.policy import get_policy
from agentic_kvc.policy.base import InstanceView, TierHits
from agentic_kvc.policy.fleet import RouterState
from agentic_kvc.policy.predicted_ttft import fitted_cost, predict_ttft_s
from agentic_kvc.policy.tier_pricing import TierLinkSpeeds, reload_s, tier_params_from_fleet

KVB = 98_304  # Qwen3-Coder-30B-A3B KV bytes per token (the h20 profile's model)
LINKS = {
    "tier_host_h2d_gbps": 51.2,
    "tier_host_latency_s": 1e-5,
    "tier_disk_read_gbps": 6.5,
    "tier_disk_latency_s": 1e-4,
    "kv_bytes_per_token": float(KVB),
}
# 20k-token prompt: instance 0 holds 19,008 tokens in host memory only, instance 1 2,000 in HBM.
HOST_VS_HBM = {0: (0, 19_008, 0), 1: (2_000, 0, 0)}


def _pol(**kw: object):  # type: ignore[no-untyped-def]
    return get_policy("predicted_ttft", {**LINKS, **kw})


def test_a_cheap_reload_beats_recomputing_and_the_decision_names_it() -> None:
    r = req(20_000)
    blind = _pol(tier_pricing=False).decide(r, _fleet(2, FixedTiers(HOST_VS_HBM)))
    assert blind.prefill == 1  # HBM only: 2,000 cached beats 0
    d = _pol(objective="ttft").decide(r, _fleet(2, FixedTiers(HOST_VS_HBM)))
    assert d.prefill == 0
    assert (d.predicted_cached_tokens, d.predicted_host_tokens) == (0, 19_008)
    # Idle: the score is the recompute of the 992-token tail plus the whole reload.
    cost = fitted_cost("h20", "qwen3-coder-30b-a3b")
    tail = predict_ttft_s(InstanceView(0), 992, 19_008, 10_000, cost, 8192)
    reload = 1e-5 + 19_008 * KVB / 51.2e9
    assert d.scores[0] == pytest.approx(tail + reload, abs=1e-4)
    state = RouterState(2)
    state.admit(r, d)
    assert state.instances[0].pending_prefill_tokens == 992
    assert state.instances[0].pending_host_reload_tokens == 19_008


def test_the_links_queue_and_a_slow_disk_price_a_hit_above_recomputing() -> None:
    r = req(20_000)
    # 40M tokens already routed onto instance 0's host link: ~77 s of reloads ahead.
    f = _fleet(2, FixedTiers(HOST_VS_HBM), pending_host_reload_tokens=[40_000_000, 0])
    assert _pol().decide(r, f).prefill == 1
    on_disk = {0: (0, 0, 19_008), 1: (2_000, 0, 0)}
    assert _pol().decide(r, _fleet(2, FixedTiers(on_disk))).prefill == 0  # NVMe: still cheap
    slow = _pol(tier_disk_read_gbps=0.05)  # 1.9 GB at 50 MB/s: 37 s, more than recomputing
    assert slow.decide(r, _fleet(2, FixedTiers(on_disk))).prefill == 1


def test_a_reload_shorter_than_the_queue_ahead_costs_nothing_extra() -> None:
    r = req(20_000)
    f = _fleet(2, FixedTiers(HOST_VS_HBM), pending_prefill_tokens=[30_000, 30_000])
    d = _pol(objective="ttft").decide(r, f)
    cost = fitted_cost("h20", "qwen3-coder-30b-a3b")
    inst = f.instances[0]
    assert d.scores[0] == pytest.approx(
        predict_ttft_s(inst, 992, 19_008, 10_000, cost, 8192), abs=1e-4
    )


def test_no_tier_below_hbm_changes_nothing() -> None:
    rng = random.Random(7)
    for split in (False, True):
        for _ in range(100):
            n = rng.randrange(2, 6)
            hbm = {i: rng.randrange(0, 1200) * 16 for i in range(n)}
            load = {
                "num_requests": [rng.randrange(5) for _ in range(n)],
                "pending_prefill_tokens": [rng.randrange(20_000) for _ in range(n)],
                "decode_requests": [rng.randrange(4) for _ in range(n)],
                "decode_tokens": [rng.randrange(50_000) for _ in range(n)],
            }
            r = req(20_000, output_tokens=200)
            tiers = FixedTiers({i: (h, 0, 0) for i, h in hbm.items()})
            a = _pol(split=split).decide(r, _fleet(n, tiers, **load))
            b = _pol(split=split).decide(r, _fleet(n, FixedCache(hbm), **load))
            assert (a.prefill, a.decode, a.scores) == (b.prefill, b.decode, b.scores)
            assert a.predicted_host_tokens == a.predicted_disk_tokens == 0


def test_reload_time_parts_and_params_from_the_fleet() -> None:
    links = TierLinkSpeeds(50e9, 1e-5, 5e9, 1e-4)
    inst = InstanceView(0, pending_host_reload_tokens=1000, pending_disk_reload_tokens=0)
    host = 1e-5 + (1000 + 500) * 100 / 50e9
    disk = 1e-4 + 200 * 100 / 5e9
    assert reload_s(inst, TierHits(0, 500, 200), 100, links) == pytest.approx(max(host, disk))
    assert reload_s(inst, TierHits(64), 100, links) == 0.0
    cfg = KVTiersConfig(host_gib=64, host_h2d_gbps=25.0, disk_latency_s=0.001)
    assert tier_params_from_fleet(cfg) == {
        "tier_host_h2d_gbps": 25.0,
        "tier_disk_latency_s": 0.001,
    }
