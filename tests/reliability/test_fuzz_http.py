"""Bad input at the proxy's HTTP API: hand-picked cases, then schemathesis from its OpenAPI.

The engine is a tolerant fake (it answers any body), so every 5xx seen would be the proxy's
own: none may occur, and every 4xx must carry an OpenAI-style JSON error body.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.openapi import OPENAPI
from agentic_kvc.proxy.server import ProxyThread, ServerThread
from agentic_kvc.proxy.settings import ProxySettings

from .conftest import idle

EXAMPLES = int(os.environ.get("AKVC_FUZZ_EXAMPLES", "50"))


class TolerantFake(FakeVLLM):
    """Generates at most 8 tokens whatever was asked, so fuzzed max_tokens stay cheap, and
    shrugs off fields the proxy passes through untouched (its own crash would be a 5xx that
    is not the proxy's)."""

    async def _generate(self, path, body, send):  # type: ignore[no-untyped-def]
        if not isinstance(body.get("max_tokens"), int) or not 0 < body["max_tokens"] <= 8:
            body = {**body, "max_tokens": 8}
        if not isinstance(body.get("stream_options"), dict | None):  # vLLM would answer 400
            body = {**body, "stream_options": None}
        await super()._generate(path, body, send)

    async def _messages(self, body, send):  # type: ignore[no-untyped-def]
        if not isinstance(body.get("max_tokens"), int) or not 0 < body["max_tokens"] <= 8:
            body = {**body, "max_tokens": 8}
        await super()._messages(body, send)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyThread]:
    fake = ServerThread(TolerantFake()).start()
    settings_ = ProxySettings(
        engines=[fake.url],
        port=0,
        records=tmp_path_factory.mktemp("fuzz") / "records.jsonl",
        scrape_interval_s=0.5,
    )
    p = ProxyThread(settings_).start()
    yield p
    p.stop()
    fake.stop()


# What a client may get wrong, and the status each must get (the proxy's own checks; the
# engine's own 4xx are tested on real vLLM in tests/integration/test_real_vllm_proxy.py).
BAD = [
    ("malformed JSON", b"{not json", 400),
    ("truncated JSON", b'{"prompt": [1, 2', 400),
    ("empty body", b"", 400),
    ("JSON array", b"[1, 2]", 400),
    ("JSON string", b'"prompt"', 400),
    ("missing prompt", b'{"max_tokens": 3}', 400),
    ("empty prompt", b'{"prompt": [], "max_tokens": 3}', 400),
    ("prompt of wrong type", b'{"prompt": {"a": 1}}', 400),
    ("max_tokens a string", b'{"prompt": [1], "max_tokens": "x"}', 400),
    ("max_tokens negative", b'{"prompt": [1], "max_tokens": -5}', 400),
    ("max_tokens a float", b'{"prompt": [1], "max_tokens": 2.5}', 400),
    ("not UTF-8", b'{"prompt": "\xff\xfe"}', 400),
    ("stream_options a string", b'{"prompt": [1], "stream": true, "stream_options": "x"}', 400),
    ("deeply nested", b'{"prompt": [1], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
]


@pytest.mark.parametrize(("name", "raw", "status"), BAD, ids=[b[0] for b in BAD])
def test_bad_bodies_get_4xx_json_errors(
    proxy: ProxyThread, name: str, raw: bytes, status: int
) -> None:
    for path in ("/v1/completions", "/v1/chat/completions"):
        r = httpx.post(proxy.url + path, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == status or (name == "deeply nested" and r.status_code == 200), (
            path, r.status_code, r.text[:200],
        )  # fmt: skip
        if r.status_code >= 400:
            err = r.json()["error"]
            assert err["code"] == r.status_code and err["message"]
    assert idle(proxy)


def test_unknown_routes_and_methods(proxy: ProxyThread) -> None:
    cases = [("GET", "/v1/nope", 404), ("POST", "/admin", 404), ("GET", "/v1/completions", 405),
             ("DELETE", "/v1/chat/completions", 405), ("PUT", "/health", 404)]  # fmt: skip
    for method, path, status in cases:
        r = httpx.request(method, proxy.url + path)
        assert r.status_code == status and r.json()["error"]["code"] == status


def test_api_key_guards_v1_but_not_health(tmp_path) -> None:
    fake = ServerThread(TolerantFake()).start()
    p = ProxyThread(ProxySettings(engines=[fake.url], port=0, api_key="s3cret-key")).start()
    try:
        body = {"prompt": [1, 2], "max_tokens": 1}
        assert "s3cret" not in repr(p.app.settings)
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret-key"}):
            r = httpx.post(p.url + "/v1/completions", json=body, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert httpx.get(p.url + "/v1/models").status_code == 401
        ok = {"authorization": "Bearer s3cret-key"}
        assert httpx.post(p.url + "/v1/completions", json=body, headers=ok).status_code == 200
        assert httpx.get(p.url + "/health").status_code == 200
        assert httpx.get(p.url + "/metrics").status_code == 200
        assert fake.app.requests == [body]  # type: ignore[attr-defined]  # only the authorized one
    finally:
        p.stop()
        fake.stop()


schema = schemathesis.openapi.from_dict(OPENAPI)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_schemathesis_no_5xx_and_json_errors(case, proxy: ProxyThread) -> None:  # type: ignore[no-untyped-def]
    resp = case.call(base_url=proxy.url, timeout=30)
    assert resp.status_code < 500, (case.method, case.path, resp.status_code, resp.text[:300])
    if resp.status_code >= 400:
        assert resp.headers["content-type"][0].startswith("application/json")
        assert resp.json()["error"]["code"] == resp.status_code
