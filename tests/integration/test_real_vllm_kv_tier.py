"""A host KV tier on a real vLLM CPU engine (issue 30): spilled KV comes back from the tier.

One engine (tiny model) with a small HBM-equivalent KV cache (129 blocks of 32 tokens) and a
64 MiB host tier (`fleet.kv_tiers`, our host-copy SimpleCPUOffloadConnector), publishing KV
events. A session's first turn is pushed out of HBM by two other prompts; its next turn must
then find its prefix in the host tier, by the engine's own counters
(`prompt_tokens_cached_by_source{source="host"}`, the connector's load counter), faster than a
full recompute of the same prompt on the same engine (the same prompt with a fresh
`cache_salt`, so no tier or HBM block matches), with the same greedy answer. The exact view,
fed by the engine's KV events, must expect those tokens from the host tier, not from HBM.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentic_kvc.cache.kv_events import ExactCacheView
from agentic_kvc.config import FleetConfig, KVTiersConfig
from agentic_kvc.policy.base import RequestView
from agentic_kvc.proxy.cache_view import make_hasher
from agentic_kvc.serve.kv_connectors import KVLaunch, kv_launch
from agentic_kvc.serve.launcher import VllmFleet

pytestmark = pytest.mark.vllm
BLOCK = 32
HBM_TOKENS = 129 * BLOCK  # the least above max-model-len 4096: a 3,000-token prompt is 73%
PROMPT = 3000
ROUNDS = 3


def counters(url: str) -> dict[str, float]:
    """The engine's counters that say where prompt tokens came from, summed over labels
    other than `source`."""
    out: dict[str, float] = {}
    text = httpx.get(url + "/metrics", timeout=30).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.endswith("_total"):
                continue
            src = s.labels.get("source")
            key = s.name + (f"[{src}]" if src else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def complete(url: str, model: str, prompt: list[int], salt: str | None = None) -> dict[str, Any]:
    """One streamed greedy completion: client TTFT, text and usage."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": 8,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if salt is not None:
        body["cache_salt"] = salt
    t0 = time.perf_counter()
    ttft: float | None = None
    text, usage = "", None
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices"):
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                text += chunk["choices"][0]["text"]
            usage = chunk.get("usage") or usage
    assert ttft is not None and usage is not None
    return {"ttft": ttft, "text": text, "cached": usage["prompt_tokens_details"]["cached_tokens"]}


class EventFeed:
    """The exact view fed from the engine's KV events on a thread (a SUB socket)."""

    def __init__(self, endpoint: str) -> None:
        import zmq

        self.view = ExactCacheView(1, BLOCK)
        self.lock = threading.Lock()
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"kv-events")
        self._sock.setsockopt(zmq.RCVTIMEO, 200)
        self._sock.connect(endpoint)
        self._stop = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import zmq

        while not self._stop.is_set():
            try:
                _, seq, payload = self._sock.recv_multipart()
            except zmq.Again:
                continue
            try:
                with self.lock:
                    self.view.apply_message(0, int.from_bytes(seq, "big", signed=True), payload)
            except ValueError as exc:
                self.errors.append(str(exc))

    def tier_hits(self, prompt: list[int]) -> Any:
        rv = RequestView(
            "q", None, 0, len(prompt), 1, tuple(make_hasher(BLOCK).hash(None, prompt)), BLOCK
        )
        with self.lock:
            return self.view.tier_hits(rv, 1)[0]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close(0)
        self._ctx.term()


@pytest.fixture(scope="module")
def kv() -> KVLaunch:
    return kv_launch(1, None, kv_events=True)


@pytest.fixture(scope="module")
def tier_engine(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, kv: KVLaunch
) -> Iterator[VllmFleet]:
    cfg = FleetConfig(
        instances=1,
        model=str(tiny_model),
        block_size=BLOCK,
        max_num_seqs=8,
        kv_cache_tokens=HBM_TOKENS,
        kv_tiers=KVTiersConfig(host_gib=1 / 16, write_through=True),
    )
    logs = tmp_path_factory.mktemp("kv_tier_logs")
    with VllmFleet.from_config(
        cfg,
        logs,
        device="cpu",
        startup_timeout_s=400,
        per_instance_args=kv.args,
        per_instance_env=kv.env,
    ) as fleet:
        yield fleet
    assert fleet.remaining_pids() == set()


def test_spilled_session_prefix_comes_back_from_host_tier(
    tier_engine: VllmFleet, kv: KVLaunch
) -> None:
    url, model = tier_engine.urls[0], tier_engine.model_name
    feed = EventFeed(kv.events_endpoints[0])
    time.sleep(0.5)  # the SUB socket joins before traffic
    rng = random.Random(30)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(100, 8000) for _ in range(n)]

    tier_ttft, recompute_ttft = [], []
    try:
        for r in range(ROUNDS):
            session = prompt(PROMPT)
            complete(url, model, session)
            for _ in range(2):  # two other prompts push the session out of HBM
                complete(url, model, prompt(PROMPT))
            turn2 = session + prompt(64)
            want = (PROMPT // BLOCK) * BLOCK  # the session's full blocks
            time.sleep(0.3)  # the KV events of the flush reach the view
            expected = feed.tier_hits(turn2)
            before = counters(url)
            got = complete(url, model, turn2)
            after = counters(url)
            delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            # The engine's own account: every cached token came from the host tier.
            assert got["cached"] == want, (r, got, delta)
            assert delta["vllm:prompt_tokens_cached_by_source_total[host]"] == want, delta
            assert delta.get("vllm:prompt_tokens_cached_by_source_total[device]", 0) == 0
            assert delta["vllm:simple_kv_offload_load_blocks_total"] == want // BLOCK
            # The view, from KV events with a medium, expected the same split.
            assert (expected.hbm, expected.host, expected.disk) == (0, want, 0), expected
            cold = complete(url, model, turn2, salt=f"cold-{r}")
            assert cold["cached"] == 0
            assert cold["text"] == got["text"]  # the tier's KV gives the recomputed answer
            tier_ttft.append(got["ttft"])
            recompute_ttft.append(cold["ttft"])
    finally:
        feed.close()
    assert not feed.errors
    assert statistics.median(tier_ttft) < statistics.median(recompute_ttft), (
        tier_ttft,
        recompute_ttft,
    )
