"""The proxy runs the online cost fit (profiles/online.py) on the streams it relays and shows
it on /metrics and in the decision receipts (issue 31 item 2)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentic_kvc.proxy.app import ProxyApp
from agentic_kvc.proxy.fake_engine import FakeVLLM
from agentic_kvc.proxy.server import ServerThread
from agentic_kvc.proxy.settings import ProxySettings

Fakes = list[tuple[FakeVLLM, ServerThread]]


def _wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def _metric(text: str, prefix: str) -> float:
    hits = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)]
    assert len(hits) == 1, (prefix, hits)
    return hits[0]


def test_online_fit_is_fed_by_streams_and_exposed(make_proxy, fakes: Fakes) -> None:
    for fake, _ in fakes:  # first token after 40 ms, then a token every 10 ms
        fake.first_token_delay_s, fake.token_delay_s = 0.04, 0.01
    proxy, client = make_proxy(policy="predicted_ttft", params={"cost_model": "online"})
    fit = proxy.app.policy.fit
    prior = fit.coefficients()
    for i in range(4):
        body = {"prompt": list(range(40 + i)), "max_tokens": 5, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            r.read()
    _wait_for(lambda: fit.by_kind.get("decode", 0) == 4)
    assert fit.by_kind["ttft"] == 4
    assert fit.coefficients() != prior  # it moved off the prior
    text = client.get("/metrics").text
    assert _metric(text, 'akvc_proxy_cost_model_observations{kind="ttft"}') == 4.0
    assert _metric(text, 'akvc_proxy_cost_model_coefficient{term="overhead_s"}') > 0
    assert _metric(text, 'akvc_proxy_cost_model_rel_error{kind="decode"}') >= 0
    proxy.app.records.flush()
    rows = [json.loads(x) for x in Path(proxy.app.settings.records).read_text().splitlines()]
    fitted = [r["scores"]["cost_model"] for r in rows if "cost_model" in (r.get("scores") or {})]
    # the last receipt was decided after three streams had finished
    assert fitted and fitted[-1]["observations"] >= 1
    assert len(fitted[-1]["coef"]) == 5


def test_no_cost_model_metrics_without_an_online_policy(make_proxy) -> None:
    _, client = make_proxy(policy="round_robin")
    client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 1})
    assert "akvc_proxy_cost_model" not in client.get("/metrics").text


def test_a_default_profile_is_named_at_startup(caplog: pytest.LogCaptureFixture) -> None:
    """The proxy cannot tell what its engines are: predicted_ttft on its default profile says
    so (and which), once, when built; named hardware, or a policy without a profile, is quiet."""
    engines = ["http://127.0.0.1:9"]
    with caplog.at_level(logging.WARNING, logger="agentic_kvc.proxy"):
        ProxyApp(ProxySettings(engines=engines, policy="predicted_ttft"))
    assert "default profile (h20 / qwen3-coder-30b-a3b)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentic_kvc.proxy"):
        params = {"hardware": "cpu-tiny", "model": "tiny"}
        ProxyApp(ProxySettings(engines=engines, policy="predicted_ttft", params=params))
        ProxyApp(ProxySettings(engines=engines, policy="round_robin"))
    assert "default profile" not in caplog.text
