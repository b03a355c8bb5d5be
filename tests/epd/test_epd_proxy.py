"""EPD routing logic against the proxy's fake backends (no engines)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agentic_kvc.epd.proxy import EPDRouter, forward
from agentic_kvc.proxy.fake_backend import FakeVLLM


class _Hosts(httpx.AsyncBaseTransport):
    def __init__(self, apps: dict[str, FakeVLLM]) -> None:
        self.t = {h: httpx.ASGITransport(app=a) for h, a in apps.items()}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.t[f"http://{request.url.host}"].handle_async_request(request)


@pytest.mark.parametrize("concurrent", [False, True])
def test_each_request_goes_to_one_e_then_one_pd_spread_over_instances(concurrent: bool) -> None:
    apps = {f"http://{n}": FakeVLLM(first_token_delay_s=0.02) for n in ("e0", "e1", "pd0", "pd1")}
    router = EPDRouter(["http://e0", "http://e1"], ["http://pd0", "http://pd1"])

    async def main() -> list:
        async with httpx.AsyncClient(transport=_Hosts(apps)) as client:
            body = {"model": "fake-model", "prompt": [1, 2, 3], "max_tokens": 5}
            jobs = [forward(client, router, "/v1/completions", body, concurrent) for _ in range(8)]
            return await asyncio.gather(*jobs)

    results = asyncio.run(main())
    for answer, _ in results:
        assert answer["usage"]["completion_tokens"] == 5  # PD's full answer
    # 8 concurrent requests, least-loaded: 4 per instance of each kind.
    for name in ("e0", "e1", "pd0", "pd1"):
        assert len(apps[f"http://{name}"].requests) == 4
    e_ids = {
        b["ec_transfer_params"]["request_id"]
        for n in ("e0", "e1")
        for b in apps[f"http://{n}"].requests
    }
    pd_ids = {
        b["ec_transfer_params"]["request_id"]
        for n in ("pd0", "pd1")
        for b in apps[f"http://{n}"].requests
    }
    assert e_ids == pd_ids and len(e_ids) == 8
    assert all(b["max_tokens"] == 1 for n in ("e0", "e1") for b in apps[f"http://{n}"].requests)
    for _, route in results:  # PD got the pair E announced to
        pd_bodies = apps[route["pd"]].requests
        assert any(b["ec_transfer_params"] == route for b in pd_bodies)
    assert set(router.load().values()) == {0}


def test_router_needs_both_kinds() -> None:
    with pytest.raises(ValueError, match="at least one E and one PD"):
        EPDRouter([], ["http://pd0"])
