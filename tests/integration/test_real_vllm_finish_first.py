"""Finished sessions first on a real vLLM CPU engine: the release-first plugin
(serve/vllm_release_first.py, loaded through its `vllm.general_plugins` entry point where
`AKVC_RELEASE_FIRST=1`) and the proxy's `--finish-first`, the simulator's `sim.finish_first`
(tests/sim/test_sim_finish_first.py) on the engine itself.

One engine with 129 blocks of 32 tokens (the null block leaves 128), requests one at a time
through the proxy. Session A sends 40 blocks and pauses; F, a one-turn session (its turn is its
last), sends 40 other blocks; C then needs 76 blocks. vLLM's LRU queues A's and F's prompt blocks
at the free queue's tail (A's first, each tail first), so C takes the 48 free blocks in front
of them and then 28 of A's from its tail: A's next turn finds 12 blocks. With F's turn marked
last, F's 41 blocks (its partial one too) lead the queue, C takes them and 35 of the others, and
A's next turn finds all 40. Both variants run on the same engine, interleaved, each round with
fresh prompts; the router's estimate, told of the release, must predict the same hits. (Measured
2026-11-30: 384 and 1,280 tokens in every round; the estimate predicts 448 for plain LRU, as it
does not count the requests' partial blocks, and 1,280 told.)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentic_kvc.proxy.server import ProxyThread
from agentic_kvc.proxy.settings import ProxySettings
from agentic_kvc.serve.launcher import VllmFleet
from agentic_kvc.serve.vllm_release_first import ENV
from tests.integration.test_real_vllm_kv_tier import BLOCK, _await, complete, small_engine

pytestmark = pytest.mark.vllm  # about a minute: the only real check of the flagged path
A_BLOCKS, F_BLOCKS, C_TOKENS = 40, 40, 2400


@pytest.fixture(scope="module")
def engine(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmFleet]:
    cfg = small_engine(tiny_model)
    logs = tmp_path_factory.mktemp("finish_first_logs")
    with VllmFleet.from_config(cfg, logs, device="cpu", startup_timeout_s=400) as fleet:
        assert fleet.plan.specs[0].env[ENV] == "1"  # the launcher turns the plugin on
        yield fleet
    assert fleet.remaining_pids() == set()


def _post(url: str, model: str, prompt: list[int], session: str, last: bool) -> dict[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0}
    headers = {"x-session-id": session, "x-session-last-turn": "true" if last else "false"}
    r = httpx.post(url + "/v1/completions", json=body, headers=headers, timeout=120)
    r.raise_for_status()
    return r.json()


def test_a_finished_sessions_kv_is_reused_before_a_paused_ones(engine: VllmFleet) -> None:
    model = engine.model_name
    records: list[dict[str, Any]] = []
    settings = ProxySettings(
        engines=engine.urls,
        port=0,
        policy="round_robin",
        finish_first=True,
        scrape_interval_s=0.5,
        on_record=records.append,
    )
    rng = random.Random(29)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(100, 8000) for _ in range(n)]

    found: dict[bool, list[tuple[int, int]]] = {False: [], True: []}
    with ProxyThread(settings) as proxy:
        complete(proxy.url, model, prompt(3 * BLOCK))  # warm-up: startup's first request
        for r in range(4):
            first = r % 2 == 1  # interleaved: plain LRU, finished first, ...
            a = prompt(A_BLOCKS * BLOCK)
            _post(proxy.url, model, a, f"a{r}", last=False)
            _post(proxy.url, model, prompt(F_BLOCKS * BLOCK), f"f{r}", last=first)
            _post(proxy.url, model, prompt(C_TOKENS), f"c{r}", last=first)
            got = _post(proxy.url, model, a + prompt(2 * BLOCK), f"a{r}", last=first)
            cached = got["usage"]["prompt_tokens_details"]["cached_tokens"]
            _await(lambda n=5 + 4 * r: len(records) >= n, "the proxy wrote no record")
            found[first].append((cached, records[-1]["predicted_cached_tokens"]))
    print(f"(engine hit, router's prediction) per round: {found}")  # with -s
    assert all(c == A_BLOCKS * BLOCK for c, _ in found[True]), found
    assert all(c == 12 * BLOCK for c, _ in found[False]), found
    # The router's estimate, told of the release, predicts the finished-first hit.
    assert all(p == A_BLOCKS * BLOCK for _, p in found[True]), found
