"""The proxy's record of what its exact view expects below HBM (`predicted_host_tokens`,
`predicted_disk_tokens`, issue 30): asked of the view only when it holds blocks below HBM, so
engines without offloading cost no extra walk of the prompt per request (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentic_kvc.cache.hashing import vllm_block_hashes, vllm_event_hash
from agentic_kvc.cache.kv_events import ExactCacheView
from agentic_kvc.policy.base import RequestView, TierHits
from agentic_kvc.proxy.server import ProxyThread

BS = 16
PROMPT = list(range(7000, 7000 + 6 * BS + 5))  # 6 full blocks and a partial one
ENGINE = [vllm_event_hash(h) for h in vllm_block_hashes(PROMPT, BS)]


class CountingView(ExactCacheView):
    """The exact view, counting `tier_hits` walks."""

    def __init__(self, n_instances: int) -> None:
        super().__init__(n_instances, BS)
        self.walks = 0

    def tier_hits(self, request: RequestView, n_instances: int) -> list[TierHits]:
        self.walks += 1
        return super().tier_hits(request, n_instances)


def _stored(lo: int, hi: int, medium: str | None) -> dict[str, Any]:
    return {
        "type": "BlockStored",
        "block_hashes": ENGINE[lo:hi],
        "parent_block_hash": ENGINE[lo - 1] if lo else None,
        "token_ids": PROMPT[lo * BS : hi * BS],
        "block_size": BS,
        "medium": medium,
    }


def _records(proxy: ProxyThread) -> list[dict[str, Any]]:
    proxy.app.records.flush()
    path = proxy.app.settings.records
    assert path is not None
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _send(client: Any, n: int = 2) -> None:
    for _ in range(n):
        r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 1})
        assert r.status_code == 200, r.text


def test_no_walk_without_blocks_below_hbm(make_proxy) -> None:  # type: ignore[no-untyped-def]
    view = CountingView(2)
    view.apply(0, _stored(0, 6, "GPU"))  # HBM only: no medium below it
    proxy, client = make_proxy(policy="round_robin", cache_view="exact", exact_cache=view)
    _send(client)
    recs = _records(proxy)
    assert [(r["predicted_host_tokens"], r["predicted_disk_tokens"]) for r in recs] == [
        (0, 0),
        (0, 0),
    ]
    assert view.walks == 0
    assert [r["predicted_cached_tokens"] for r in recs] == [6 * BS, 0]  # round robin: 0 then 1


def test_with_blocks_below_hbm_the_record_names_them(make_proxy) -> None:  # type: ignore[no-untyped-def]
    view = CountingView(2)
    for i in (0, 1):  # both: blocks 0-1 on the GPU, 2-5 offloaded to CPU
        view.apply(i, _stored(0, 2, "GPU"))
        view.apply(i, _stored(2, 6, "CPU"))
    proxy, client = make_proxy(policy="round_robin", cache_view="exact", exact_cache=view)
    _send(client)
    recs = _records(proxy)
    assert [(r["predicted_host_tokens"], r["predicted_disk_tokens"]) for r in recs] == [
        (4 * BS, 0),
        (4 * BS, 0),
    ]
    assert view.walks == 2
