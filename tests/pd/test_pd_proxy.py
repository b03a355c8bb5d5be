"""The proxy's PD execution against fake engines: what P and D receive, records, fallback."""

from __future__ import annotations

import json
import time

import pytest
from pd_fakes import Fakes, ProxyFactory, read_records

from agentic_kvc.proxy import pd

PROMPT = list(range(1000, 1000 + 70))  # 4 full blocks of 16 and a partial one


def _body(**kw: object) -> dict[str, object]:
    return {"model": "fake-model", "prompt": PROMPT, "max_tokens": 5, **kw}


def test_prefill_and_decode_request_shapes() -> None:
    body = {
        "prompt": [1, 2],
        "max_tokens": 9,
        "stream": True,
        "min_tokens": 3,
        "stream_options": {"include_usage": True},
    }
    p = pd.prefill_body(body, "nixl")
    assert p["max_tokens"] == 1 and p["stream"] is False
    assert "stream_options" not in p and "min_tokens" not in p
    assert p["kv_transfer_params"]["do_remote_decode"] is True
    assert body["max_tokens"] == 9 and "kv_transfer_params" not in body  # client's untouched
    params = {"do_remote_prefill": True, "remote_engine_id": "e0", "remote_block_ids": [[1]]}
    d = pd.decode_body(body, "nixl", params)
    assert d["kv_transfer_params"] is params and d["max_tokens"] == 9 and d["stream"] is True
    with pytest.raises(pd.PrefillError, match="no kv_transfer_params"):
        pd.decode_body(body, "nixl", None)

    mp = pd.prefill_body(body, "mooncake", "t-1")
    assert mp["kv_transfer_params"] == {"do_remote_decode": True, "transfer_id": "t-1"}
    peer = {"engine_id": "akvc-0", "bootstrap_addr": "10.0.0.1:8998"}
    md = pd.decode_body(body, "mooncake", None, peer, "t-1")
    assert md["kv_transfer_params"] == {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "akvc-0",
        "remote_bootstrap_addr": "10.0.0.1:8998",
        "transfer_id": "t-1",
    }
    with pytest.raises(ValueError, match="transfer_id"):
        pd.prefill_body(body, "mooncake")
    with pytest.raises(ValueError, match="engine_id and bootstrap_addr"):
        pd.decode_body(body, "mooncake", None, {"engine_id": "x"}, "t")
    with pytest.raises(ValueError, match="expected one of"):
        pd.prefill_body(body, "lmcache")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pd_class", "colo"),
    [
        ("HEAVY_P2P", "HEAVY_COLO"),
        ("WARM_P2P", "WARM"),
        ("MEDIUM_P2P", "MEDIUM"),
        ("PD", "COLOCATED"),
    ],
)
def test_colocated_class(pd_class: str, colo: str) -> None:
    assert pd.colocated_class(pd_class) == colo


def test_pd_non_streaming_goes_p_then_d_and_is_recorded(
    pd_proxy: ProxyFactory, pd_fakes: Fakes, tmp_path
) -> None:
    proxy, client = pd_proxy()
    r = client.post("/v1/completions", json=_body())
    assert r.status_code == 200, r.text
    assert r.headers["x-akvc-prefill"] == "0" and r.headers["x-akvc-decode"] == "1"
    (p_fake, _), (d_fake, _) = pd_fakes
    assert len(p_fake.requests) == 1 and len(d_fake.requests) == 1
    p_req, d_req = p_fake.requests[0], d_fake.requests[0]
    assert p_req["max_tokens"] == 1 and p_req["kv_transfer_params"]["do_remote_decode"]
    assert d_req["max_tokens"] == 5
    assert d_req["kv_transfer_params"]["remote_engine_id"] == "fake-0"  # P's, passed on
    assert r.json()["usage"]["completion_tokens"] == 5  # D's answer reaches the client
    proxy.stop()
    (rec,) = read_records(tmp_path / "records.jsonl")
    assert (rec["prefill_instance"], rec["decode_instance"]) == (0, 1)
    assert rec["route_class"].endswith("_P2P") and rec["pd_fallback"] is None
    assert rec["t_prefill_sent"] <= rec["t_prefill_done"] <= rec["t_done"]
    assert rec["kv_transfer_tokens"] == len(PROMPT)  # D held nothing: it pulls it all
    assert rec["prefill_cached_tokens"] == 0 and rec["predicted_decode_cached_tokens"] == 0


def test_pd_streaming_relays_d_stream_and_times_the_handoff(
    pd_proxy: ProxyFactory, pd_fakes: Fakes, tmp_path
) -> None:
    proxy, client = pd_proxy()
    with client.stream("POST", "/v1/completions", json=_body(stream=True)) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) == 5 + 1  # usage dropped: not asked for
    (p_fake, _), (d_fake, _) = pd_fakes
    assert p_fake.requests[0]["stream"] is False and d_fake.requests[0]["stream"] is True
    proxy.stop()
    (rec,) = read_records(tmp_path / "records.jsonl")
    assert rec["t_prefill_done"] <= rec["t_first_token"] <= rec["t_done"]
    assert rec["kv_transfer_s"] == pytest.approx(rec["t_first_token"] - rec["t_prefill_done"])
    assert rec["output_tokens"] == 5


@pytest.mark.parametrize("fault", ["http_500", "no_params", "down"])
def test_prefill_failure_falls_back_to_colocated_on_d(
    pd_proxy: ProxyFactory, pd_fakes: Fakes, tmp_path, fault: str
) -> None:
    (p_fake, p_server), (d_fake, _) = pd_fakes
    if fault == "http_500":
        p_fake.prefill_status = 500
    elif fault == "no_params":
        p_fake.return_params = False
    # No scraping: the request, not a scrape, is what finds P down.
    proxy, client = pd_proxy(scrape_interval_s=0 if fault == "down" else 0.2)
    if fault == "down":
        p_server.stop()
    r = client.post("/v1/completions", json=_body(stream=True))
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
    assert r.headers["x-akvc-prefill"] == "1" == r.headers["x-akvc-decode"]
    (d_req,) = d_fake.requests
    assert "kv_transfer_params" not in d_req and d_req["max_tokens"] == 5  # a plain request
    deadline = time.monotonic() + 5
    while proxy.app.state.instances[1].num_requests and time.monotonic() < deadline:
        time.sleep(0.01)
    inst = proxy.app.state.instances
    assert [i.num_requests for i in inst] == [0, 0]  # nothing leaked by the swap of tickets
    assert [i.pending_prefill_tokens for i in inst] == [0, 0]
    proxy.stop()
    (rec,) = read_records(tmp_path / "records.jsonl")
    assert rec["error"] is None
    assert (rec["prefill_instance"], rec["decode_instance"]) == (1, 1)
    assert not rec["route_class"].endswith("_P2P") and rec["reason"].endswith("+pd_fallback")
    expect = {
        "http_500": "HTTP 500",
        "no_params": "no kv_transfer_params",
        "down": "failed the prefill",
    }[fault]
    assert expect in rec["pd_fallback"]
    assert rec["t_prefill_done"] is None and rec["kv_transfer_tokens"] is None


def test_mooncake_form_names_the_transfer_and_p(pd_proxy: ProxyFactory, pd_fakes: Fakes) -> None:
    peers = [
        {"engine_id": f"akvc-{i}", "bootstrap_addr": f"127.0.0.1:{8998 + i}"} for i in range(2)
    ]
    _, client = pd_proxy(kv_connector="mooncake", kv_peers=peers)
    r = client.post("/v1/completions", json=_body(), headers={"x-request-id": "req-7"})
    assert r.status_code == 200, r.text
    (p_fake, _), (d_fake, _) = pd_fakes
    p_params = p_fake.requests[0]["kv_transfer_params"]
    d_params = d_fake.requests[0]["kv_transfer_params"]
    assert p_params == {"do_remote_decode": True, "transfer_id": "akvc-req-7"}
    assert d_params["transfer_id"] == "akvc-req-7" and d_params["do_remote_prefill"]
    assert (d_params["remote_engine_id"], d_params["remote_bootstrap_addr"]) == (
        "akvc-0",
        "127.0.0.1:8998",
    )


def test_settings_reject_mooncake_without_peers(pd_fakes: Fakes) -> None:
    from agentic_kvc.proxy.settings import ProxySettings

    urls = [s.url for _, s in pd_fakes]
    with pytest.raises(ValueError, match="kv_peers"):
        ProxySettings(engines=urls, kv_connector="mooncake")
    with pytest.raises(ValueError, match="--kv-events: 1 given for 2 engines"):
        ProxySettings(engines=urls, kv_events=["tcp://127.0.0.1:1"])
    json.dumps(urls)
