"""Health and retries: what marks an engine unhealthy, where a retry goes, how one comes back.

Routers in production have taken whole fleets out by counting clients' 4xx as engine
failures, and re-picked a broken worker on every retry; these pin the proxy's behaviour.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agentic_kvc.policy.base import Decision, FleetView, NoHealthyInstance, Policy, RequestView
from agentic_kvc.policy.fleet import RouterState
from agentic_kvc.policy.registry import get_policy, list_policies, register

from .conftest import DroppingEngine, idle, records_of


class _PreferLast(Policy):
    """Test policy: the highest-numbered healthy instance, so a retry has one choice left."""

    name = "test_prefer_last"

    def decide(self, request: RequestView, fleet: FleetView) -> Decision:
        live = [i.index for i in fleet.healthy()]
        if not live:
            raise NoHealthyInstance("none")
        return Decision(live[-1], live[-1], "COLD", "prefer_last", self.name, 0, {})


if "test_prefer_last" not in list_policies():
    register(_PreferLast)


def _wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


BODY = {"prompt": [1, 2, 3, 4], "max_tokens": 2}


@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_engine_4xx_is_relayed_and_never_marks_it_unhealthy(proxy_over, faults, status) -> None:
    fb, _ = faults[1]
    fb.status = status
    proxy, client = proxy_over([s.url for _, s in faults], policy="test_prefer_last")
    for _ in range(5):
        r = client.post("/v1/completions", json=BODY)
        assert r.status_code == status and r.json()["error"]["code"] == status
        assert r.headers["x-akvc-decode"] == "1"  # still picked: still healthy
    assert all(i.healthy for i in proxy.app.state.instances)
    assert fb.generate_calls == 5 and idle(proxy)
    recs = records_of(proxy)
    assert len(recs) == 5 and all(f"upstream HTTP {status}" in r["error"] for r in recs)


def test_engine_5xx_becomes_a_recorded_error(proxy_over, faults) -> None:
    fb, _ = faults[0]
    fb.status = 503
    proxy, client = proxy_over([s.url for _, s in faults], policy="round_robin")
    codes = [client.post("/v1/completions", json=BODY).status_code for _ in range(4)]
    assert sorted(codes) == [200, 200, 503, 503]
    recs = records_of(proxy)
    assert sum("upstream HTTP 503" in (r["error"] or "") for r in recs) == 2
    assert idle(proxy)


def test_slow_engine_times_out_into_recorded_504s(proxy_over, faults) -> None:
    for fb, _ in faults:
        fb.first_token_delay_s = 3.0
    proxy, client = proxy_over([s.url for _, s in faults], upstream_timeout_s=0.4)
    t0 = time.monotonic()
    r = client.post("/v1/completions", json=BODY)
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"
    # A stream that starts and then stalls past the deadline ends with an error event.
    for fb, _ in faults:
        fb.first_token_delay_s, fb.token_delay_s = 0.0, 1.0
    r = client.post("/v1/completions", json={**BODY, "max_tokens": 5, "stream": True})
    assert time.monotonic() - t0 < 4.0  # deadlines, not hangs
    assert r.status_code == 200 and '"code":504' in r.text and r.text.endswith("[DONE]\n\n")
    recs = records_of(proxy)
    assert [r["error"] for r in recs] == ["upstream timed out", "upstream timed out mid-stream"]
    assert idle(proxy) and all(i.healthy for i in proxy.app.state.instances)


def test_retry_never_goes_back_to_the_instance_that_failed(proxy_over, faults) -> None:
    dropper = DroppingEngine()
    try:
        urls = [faults[0][1].url, dropper.url]
        proxy, client = proxy_over(urls, policy="test_prefer_last")
        answered = []
        for _ in range(6):
            # The dropper is healthy again (its probe answers 200) before each request, so
            # the policy picks it first every time and the retry must go elsewhere.
            _wait_for(lambda: proxy.app.state.instances[1].healthy)
            r = client.post("/v1/completions", json=BODY)
            assert r.status_code == 200, r.text
            answered.append(r.headers["x-akvc-decode"])
        assert answered == ["0"] * 6
        assert dropper.posts == 6  # tried once per request, never twice
        assert all(r["error"] is None for r in records_of(proxy))
        assert idle(proxy)
    finally:
        dropper.stop()


def test_unhealthy_engine_is_probed_and_readmitted(proxy_over, faults) -> None:
    fb, _ = faults[1]
    proxy, client = proxy_over([s.url for _, s in faults], policy="round_robin")
    fb.healthy = False  # its /health and /metrics answer 503: the scrape notices
    _wait_for(lambda: not proxy.app.state.instances[1].healthy)
    assert client.get("/health").json()["engines"][1]["healthy"] is False
    used = {client.post("/v1/completions", json=BODY).headers["x-akvc-decode"] for _ in range(4)}
    assert used == {"0"}
    fb.healthy = True
    _wait_for(lambda: proxy.app.state.instances[1].healthy)
    used = {client.post("/v1/completions", json=BODY).headers["x-akvc-decode"] for _ in range(4)}
    assert used == {"0", "1"}


@pytest.mark.parametrize("name", sorted(set(list_policies()) - {"test_prefer_last"}))
def test_every_policy_sees_health_in_its_fleet_view(name: str) -> None:
    """No registered policy routes to an instance its fleet view marks unhealthy."""
    state = RouterState(3)
    state.set_healthy(1, False)
    policy = get_policy(name, {})
    picked = set()
    for k in range(30):
        req = RequestView(f"r{k}", f"s{k % 5}", 0, 200 + 300 * (k % 4), 16, (), 16)
        fleet = state.view(float(k))
        assert fleet.instances[1].healthy is False
        d = policy.decide(req, fleet)
        picked |= {d.prefill, d.decode}
        state.finish(state.admit(req, d, float(k)))
    assert 1 not in picked and picked
    state.set_healthy(0, False)
    state.set_healthy(2, False)
    with pytest.raises(NoHealthyInstance):
        policy.decide(RequestView("x", None, 0, 100, 16, (), 16), state.view(100.0))


def test_readmission_does_not_cut_requests_in_flight(proxy_over, faults) -> None:
    """An engine marked out (e.g. a probe timed out under load) and readmitted while it still
    streams: the fresh pool must not close the connections of answers in progress."""
    fb, _ = faults[1]
    proxy, client = proxy_over([s.url for _, s in faults], policy="test_prefer_last")
    body = {**BODY, "max_tokens": 12, "stream": True, "fake_token_delay_s": 0.25}
    with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.headers["x-akvc-decode"] == "1"
        lines = r.iter_lines()
        assert next(lines).startswith("data: {")
        fb.healthy = False
        _wait_for(lambda: not proxy.app.state.instances[1].healthy)
        fb.healthy = True
        _wait_for(lambda: proxy.app.state.instances[1].healthy)
        text = "\n".join(lines)
    assert text.rstrip().endswith("data: [DONE]") and '"error"' not in text
    # The client's response ends at [DONE]; the proxy writes the record after it has read the
    # engine's end of body too, so on a loaded machine the record may come a moment later.
    _wait_for(lambda: len(records_of(proxy)) > 0)
    recs = records_of(proxy)
    assert [r["error"] for r in recs] == [None] and recs[0]["output_tokens"] == 12
    assert idle(proxy)
