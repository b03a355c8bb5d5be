"""The finish signal through the proxy (proxy/session.py) and `--finish-first`: a session's
last turn asks its engine to free the turn's KV first (vLLM's `vllm_xargs`, read by
serve/vllm_release_first.py), and the router's estimated view is told. Fake engines here (the
proxy's own logic); the real engine's side is tests/integration/test_real_vllm_finish_first.py."""

from __future__ import annotations

from typing import Any

import pytest

from agentic_kvc.proxy.app import RELEASE_FIRST_XARG
from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.server import ServerThread
from agentic_kvc.proxy.session import identify
from agentic_kvc.serve.vllm_release_first import XARG

Fakes = list[tuple[FakeVLLM, ServerThread]]
PROMPT = list(range(100, 164))  # 4 blocks of 16


def test_the_proxy_asks_with_the_key_the_plugin_reads() -> None:
    assert RELEASE_FIRST_XARG == XARG


def _sent(fakes: Fakes) -> list[dict[str, Any]]:
    return [body for fake, _ in fakes for body in fake.requests]


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({}, {}, None),
        ({"x-session-last-turn": "true"}, {}, True),
        ({"x-session-last-turn": " 1 "}, {}, True),
        ({"x-session-last-turn": "No"}, {}, False),
        ({}, {"metadata": {"last_turn": True}}, True),
        ({}, {"metadata": {"last_turn": False}}, False),
        # The header outranks the body, as session headers do.
        ({"x-session-last-turn": "0"}, {"metadata": {"last_turn": True}}, False),
    ],
)
def test_the_finish_signal_is_read_from_header_or_body(
    headers: dict[str, str], body: dict[str, Any], expected: bool | None
) -> None:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    ident = identify({"session_id": "s", **body}, raw)
    assert ident.last_turn is expected and ident.session == "s"
    # Without a session id, the signal is still read (the prompt may name the session).
    assert identify(body, raw).last_turn is expected


@pytest.mark.parametrize(
    ("headers", "body", "field"),
    [
        ({"x-session-last-turn": "maybe"}, {}, "x-session-last-turn"),
        ({}, {"metadata": {"last_turn": "yes"}}, "metadata.last_turn"),
    ],
)
def test_a_finish_signal_that_is_not_a_boolean_is_a_400_naming_it(
    make_proxy, fakes: Fakes, headers: dict[str, str], body: dict[str, Any], field: str
) -> None:
    _, client = make_proxy(policy="round_robin")
    r = client.post(
        "/v1/completions", json={"prompt": PROMPT, "max_tokens": 1, **body}, headers=headers
    )
    assert r.status_code == 400 and field in r.json()["error"]["message"]
    assert _sent(fakes) == []


def test_the_last_turn_carries_the_ask_only_with_finish_first(make_proxy, fakes: Fakes) -> None:
    _, client = make_proxy(policy="sticky_least_loaded", finish_first=True)
    last = {"x-session-id": "agent-1", "x-session-last-turn": "true"}
    client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 1}, headers=last)
    client.post(
        "/v1/completions",
        json={"prompt": [*PROMPT, 1], "max_tokens": 1, "vllm_xargs": {"mine": 3}},
        headers={**last, "x-session-id": "agent-2"},
    )
    client.post(
        "/v1/completions",
        json={"prompt": [*PROMPT, 1, 2], "max_tokens": 1},
        headers={"x-session-id": "agent-3", "x-session-last-turn": "false"},
    )
    sent = sorted(_sent(fakes), key=lambda b: len(b["prompt"]))
    assert [b.get("vllm_xargs") for b in sent] == [{XARG: 1}, {"mine": 3, XARG: 1}, None]

    for fake, _ in fakes:
        fake.requests.clear()
    _, plain = make_proxy(policy="sticky_least_loaded")
    plain.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 1}, headers=last)
    assert [b.get("vllm_xargs") for b in _sent(fakes)] == [None]


def test_the_estimated_view_is_told_of_the_release(
    make_proxy, fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, client = make_proxy(policy="round_robin", finish_first=True)
    told: list[tuple[int, tuple[int, ...], bool]] = []
    cache = proxy.app.state.cache
    plain = cache.demote

    def demote(instance: int, hashes: Any, now: float, store_below: bool = False) -> None:
        told.append((instance, tuple(hashes), store_below))
        plain(instance, hashes, now, store_below)

    monkeypatch.setattr(cache, "demote", demote)
    r = client.post(
        "/v1/completions",
        json={"prompt": PROMPT, "max_tokens": 1},
        headers={"x-session-id": "a", "x-session-last-turn": "1"},
    )
    client.post("/v1/completions", json={"prompt": PROMPT[:32], "max_tokens": 1})
    home = int(r.headers["x-akvc-decode"])
    assert len(told) == 1 and told[0][0] == home and len(told[0][1]) == 4
    assert told[0][2] is False  # nothing is written below HBM: a plain release to the head
