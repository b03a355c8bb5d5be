"""The estimated view with the engines' tier below HBM (`--tier-view`): learned from the
engines' `vllm:simple_kv_offload_info`, fed by the HBM estimate's evictions (a lazy tier), and
named in each record's `predicted_host_tokens`. Fake engines: this is the proxy's own logic;
tests/integration/test_real_vllm_kv_tier.py holds it to a real engine's tier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentic_kvc.cache.prefix_index import EstimatedPrefixIndex
from agentic_kvc.cache.tier_index import TieredPrefixIndex
from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.server import ProxyThread, ServerThread
from agentic_kvc.proxy.settings import ProxySettings
from tests.proxy.test_proxy_app import _wait_for

BS = 16
HBM = 8  # blocks per engine


def _tier_line(lazy: bool, blocks: int = 64, backend: str = "cpu") -> str:
    return (
        f'vllm:simple_kv_offload_info{{backend="{backend}",capacity_blocks="{blocks}",'
        f'engine="0",lazy_offload="{str(lazy).lower()}",model_name="fake-model",'
        'page_cache="false"} 1.0'
    )


def _with_tier(fakes: list[tuple[FakeVLLM, ServerThread]], line: str | None) -> None:
    for fake, _ in fakes:
        fake.num_gpu_blocks = HBM
        fake.extra_metrics = [line] if line else []


def _records(proxy: ProxyThread) -> list[dict[str, Any]]:
    proxy.app.records.flush()
    assert proxy.app.settings.records is not None
    return [json.loads(x) for x in Path(proxy.app.settings.records).read_text().splitlines()]


def _prompt(seed: int, blocks: int = 6) -> list[int]:
    """Full blocks and 5 more tokens (a hit never covers the last token: vLLM recomputes it)."""
    return [seed * 1000 + i for i in range(blocks * BS + 5)]


def _send(client: Any, prompt: list[int]) -> None:
    r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})
    assert r.status_code == 200, r.text


def _learned(proxy: ProxyThread) -> bool:
    return isinstance(proxy.app.state.cache, TieredPrefixIndex)


def _start(make_proxy: Any, **overrides: Any) -> tuple[ProxyThread, Any]:
    """A proxy whose view has learned the fakes' tier (stated from the start, unlike a real
    engine, which states it once it has served a request)."""
    proxy, client = make_proxy(policy="test_most_cached", tier_view=True, **overrides)
    _wait_for(lambda: _learned(proxy))
    return proxy, client


def test_a_lazy_tier_gets_what_the_hbm_estimate_evicts(make_proxy, fakes) -> None:  # type: ignore[no-untyped-def]
    _with_tier(fakes, _tier_line(lazy=True))
    proxy, client = _start(make_proxy)
    view = proxy.app.state.cache
    assert (view.host_blocks, view.write_through, view.store_at_free) == (64, False, False)
    assert view.capacity_blocks == HBM
    a, b = _prompt(1), _prompt(2)
    _send(client, a)  # instance 0 (no cache anywhere: the lowest index)
    assert view.tier_blocks(0).host == 0  # a lazy tier gets blocks only as HBM evicts them
    _send(client, b)  # instance 0 again; its 8-block HBM estimate evicts a's last 4 blocks
    _send(client, a)  # the host tier holds them, after the 2 blocks HBM still has
    rec = _records(proxy)[-1]
    assert rec["prefill_instance"] == 0
    assert (rec["predicted_cached_tokens"], rec["predicted_host_tokens"]) == (2 * BS, 4 * BS)
    assert rec["predicted_disk_tokens"] == 0


def test_write_through_and_a_walk_over_the_pool_store_every_routed_prompt(
    make_proxy,
    fakes,  # type: ignore[no-untyped-def]
) -> None:
    for lazy, max_batched in ((False, None), (True, 4 * BS)):  # a walk of 8 blocks >= HBM's 8
        _with_tier(fakes, _tier_line(lazy=lazy))
        proxy, client = _start(make_proxy, engine_max_num_batched_tokens=max_batched)
        view = proxy.app.state.cache
        assert (view.write_through, view.store_at_free) == (not lazy, lazy)
        _send(client, _prompt(3, blocks=3))
        _send(client, _prompt(4, blocks=3))
        assert (view.tier_blocks(0).hbm, view.tier_blocks(0).host) == (
            6,
            6,
        )  # both prompts, whole, before any eviction
        proxy.stop()


def test_a_disk_tier_is_each_engines_own(make_proxy, fakes) -> None:  # type: ignore[no-untyped-def]
    _with_tier(fakes, _tier_line(lazy=True, blocks=32, backend="disk"))
    proxy, client = _start(make_proxy)
    view = proxy.app.state.cache
    assert (view.host_blocks, len(view.disk), view.disk_group) == (0, 2, [0, 1])
    a, b = _prompt(1), _prompt(2)
    for p in (a, b, a):
        _send(client, p)
    rec = _records(proxy)[-1]
    assert (rec["predicted_cached_tokens"], rec["predicted_disk_tokens"]) == (2 * BS, 4 * BS)


def test_no_tier_model_without_the_flag_or_for_a_tier_blind_policy(make_proxy, fakes) -> None:  # type: ignore[no-untyped-def]
    _with_tier(fakes, _tier_line(lazy=True))
    for overrides in ({"policy": "test_most_cached"}, {"policy": "round_robin", "tier_view": True}):
        proxy, client = make_proxy(**overrides)
        _send(client, _prompt(9))
        _wait_for(lambda p=proxy: p.app.state.cache.capacity_blocks == HBM)
        _send(client, _prompt(9))  # a scrape after the engines stated their tier
        assert type(proxy.app.state.cache) is EstimatedPrefixIndex
        proxy.stop()


def test_tier_view_is_for_the_estimated_view() -> None:
    with pytest.raises(ValueError, match="--tier-view models tiers in the estimated view"):
        ProxySettings(engines=["http://x:1"], cache_view="exact", tier_view=True)
    with pytest.raises(ValueError, match="--engine-max-num-batched-tokens 0"):
        ProxySettings(engines=["http://x:1"], engine_max_num_batched_tokens=0)
