"""Merging the proxy's breakdown into client records, and the sampler's parsing."""

from __future__ import annotations

import pytest

from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.serve.run_backend import estimate_offset, merge_proxy_records
from agentic_kvc.serve.sampler import parse_proxy_gauges


def _client(rid: str, send: float, first: float, done: float) -> RequestRecord:
    r = RequestRecord(rid, "s", 0, send, 100, output_tokens=5)
    r.t_proxy_recv, r.t_first_token, r.t_done = send, first, done
    return r.finalize()


def test_offset_is_the_least_latency_pair() -> None:
    # proxy clock = run clock - 100; loopback latencies 0.3, 0.1, 2.0 ms
    pairs = [(1.0, 1.0 - 100 + 0.0003), (2.0, 2.0 - 100 + 0.0001), (3.0, 3.0 - 100 + 0.002)]
    assert estimate_offset(pairs) == pytest.approx(100 - 0.0001)
    assert estimate_offset([]) is None


def test_merge_keeps_client_timing_and_adds_proxy_breakdown() -> None:
    client = [_client("a", 1.0, 1.5, 2.0), _client("b", 3.0, 3.2, 3.9)]
    proxy = [
        {
            "request_id": "a",
            "t_proxy_recv": -99.0,  # its own clock: 100 s behind
            "t_prefill_sent": -98.99,
            "t_first_token": -98.6,
            "route_class": "WARM",
            "reason": "affinity",
            "prefill_instance": 1,
            "decode_instance": 1,
            "scores": {"0": 3.0, "1": 1.0},
            "predicted_cached_tokens": 64,
            "cache_view": "estimated",
        },
        {"request_id": "zzz", "t_proxy_recv": 5.0},  # unknown to the client: ignored
    ]
    rows, offset = merge_proxy_records(client, proxy)
    assert offset == pytest.approx(100.0)
    a, b = rows
    assert a["t_prefill_sent"] == pytest.approx(1.01)
    assert a["ttft_s"] == pytest.approx(0.5)  # client-side TTFT, not the proxy's
    assert (a["route_class"], a["reason"], a["prefill_instance"]) == ("WARM", "affinity", 1)
    assert a["scores"] == {"0": 3.0, "1": 1.0} and a["predicted_cached_tokens"] == 64
    assert b["route_class"] == "" and b["t_prefill_sent"] is None


def test_proxy_gauges_per_instance() -> None:
    text = "\n".join(
        [
            "# HELP akvc_proxy_inflight_requests x",
            'akvc_proxy_inflight_requests{instance="0",url="http://a"} 3.0',
            'akvc_proxy_inflight_requests{instance="1",url="http://b"} 0.0',
            'akvc_proxy_pending_prefill_tokens{instance="1",url="http://b"} 512.0',
            'akvc_proxy_engine_healthy{instance="1",url="http://b"} 0.0',
            'akvc_proxy_decisions_total{policy="p"} 9.0',
        ]
    )
    got = parse_proxy_gauges(text)
    assert got == {
        0: {"router_inflight": 3.0},
        1: {"router_inflight": 0.0, "router_pending_prefill_tokens": 512.0, "healthy": 0.0},
    }
