"""warm_nixl_pairs retries an exchange whose NIXL handshake failed (D answered 500)."""

from __future__ import annotations

import json

import httpx
import pytest

from agentic_kvc.serve.kv_transfer_flags import warm_nixl_pairs

PARAMS = {"remote_engine_id": "akvc-0", "remote_block_ids": [1], "do_remote_prefill": True}


def _engines(monkeypatch: pytest.MonkeyPatch, d_failures: int) -> list[str]:
    """Two fake engines: P answers with KV params; D fails `d_failures` times, then succeeds."""
    calls: list[str] = []
    left = {"n": d_failures}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("kv_transfer_params", {}).get("do_remote_decode"):
            calls.append("p")
            return httpx.Response(200, json={"choices": [], "kv_transfer_params": PARAMS})
        calls.append("d")
        if left["n"] > 0:
            left["n"] -= 1
            return httpx.Response(500, json={"error": "handshake_setup_failed"})
        return httpx.Response(200, json={"choices": []})

    real_client = httpx.Client
    monkeypatch.setattr(
        httpx,
        "Client",
        lambda **kw: real_client(transport=httpx.MockTransport(handler), **kw),
    )
    return calls


def test_a_failed_handshake_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _engines(monkeypatch, d_failures=2)
    warm_nixl_pairs(["http://e0", "http://e1"], "m", attempts=3, retry_wait_s=0)
    # first direction: two failed exchanges then one that worked; second: one exchange
    assert calls == ["p", "d", "p", "d", "p", "d", "p", "d"]


def test_gives_up_after_the_last_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _engines(monkeypatch, d_failures=5)
    with pytest.raises(httpx.HTTPStatusError):
        warm_nixl_pairs(["http://e0", "http://e1"], "m", attempts=2, retry_wait_s=0)
    assert calls == ["p", "d", "p", "d"]
