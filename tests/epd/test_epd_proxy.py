"""EPD routing logic against the proxy's fake engines (no real vLLM)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agentic_kvc.epd.app import EPDApp
from agentic_kvc.epd.proxy import EPDRouter, forward
from agentic_kvc.proxy.fake_engine import FakeVLLM


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


# -- the proxy served (epd/app.py): what `akvc epd proxy` runs ---------------------------------


class _Logged:
    """A fake instance that logs when each request starts and ends (order across instances)."""

    def __init__(self, name: str, app, log: list) -> None:  # type: ignore[no-untyped-def]
        self.name, self.app, self.log = name, app, log

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["method"] == "POST":
            self.log.append((self.name, "start"))
            await self.app(scope, receive, send)
            self.log.append((self.name, "end"))
        else:
            await self.app(scope, receive, send)


class _Failing:
    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"encoder exploded"})


def _serve(app: EPDApp, requests: list[dict], path: str = "/v1/chat/completions") -> list:
    async def main() -> list:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://epd") as c:
            out = await asyncio.gather(*(c.post(path, json=b) for b in requests))
            health = (await c.get("/health")).json()
        return [*out, health]

    return asyncio.run(main())


def _chat(stream: bool) -> dict:
    msg = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    body = {"model": "fake-model", "messages": [msg], "max_tokens": 4, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def test_app_streams_pd_after_e_finished_over_several_instances() -> None:
    log: list = []
    fakes = {n: FakeVLLM(first_token_delay_s=0.02) for n in ("e0", "e1", "pd0", "pd1")}
    hosts = _Hosts({f"http://{n}": _Logged(n, f, log) for n, f in fakes.items()})  # type: ignore[dict-item]
    app = EPDApp(["http://e0", "http://e1"], ["http://pd0", "http://pd1"], transport=hosts)
    *answers, health = _serve(app, [_chat(stream=True) for _ in range(6)])
    for r in answers:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.text.rstrip().endswith("data: [DONE]") and '"usage"' in r.text
    assert [len(fakes[n].requests) for n in ("e0", "e1", "pd0", "pd1")] == [3, 3, 3, 3]
    for n in ("e0", "e1"):  # E answers whole, one token, no stream options
        assert all(b["max_tokens"] == 1 and not b["stream"] for b in fakes[n].requests)
        assert all("stream_options" not in b for b in fakes[n].requests)
    for n in ("pd0", "pd1"):
        assert all(b["stream"] and b["max_tokens"] == 4 for b in fakes[n].requests)
    # Sequential: each request's PD leg starts only after some E leg ended, and the number of
    # PD starts never exceeds the number of E ends so far.
    ends = starts = 0
    for name, what in log:
        ends += name.startswith("e") and what == "end"
        starts += name.startswith("pd") and what == "start"
        assert starts <= ends
    assert health["routed"] == 6 and set(health["load"].values()) == {0}


def test_app_e_failure_is_502_naming_it_and_pd_is_not_asked() -> None:
    pd = FakeVLLM()
    hosts = _Hosts({"http://e0": _Failing(), "http://pd0": pd})  # type: ignore[dict-item]
    app = EPDApp(["http://e0"], ["http://pd0"], transport=hosts)
    bad, health = _serve(app, [_chat(stream=False)])
    assert bad.status_code == 502
    assert "encoder http://e0 answered 500: encoder exploded" in bad.json()["error"]["message"]
    assert pd.requests == [] and set(health["load"].values()) == {0}


def test_app_rejects_a_body_that_is_not_a_json_object() -> None:
    app = EPDApp(["http://e0"], ["http://pd0"], transport=_Hosts({}))

    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://epd") as c:
            return await c.post("/v1/completions", content=b"[1, 2]")

    r = asyncio.run(main())
    assert r.status_code == 400 and "not a JSON object" in r.json()["error"]["message"]
