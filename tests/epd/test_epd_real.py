"""Real EPD on vLLM CPU: the tiny BLIP-2 served by an encode instance E and a prefill-decode
instance PD, embeddings moving through redis-server with our connector, requests through the
EPD proxy; beside them a default instance that encodes for itself.

Slow (four engines start): `python -m pytest -m slow tests/epd/test_epd_real.py`, under both
locks on a shared machine.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from agentic_kvc.serve.services import redis_available

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(redis_available() is None, reason="redis-server not installed"),
]


def _text(url: str, body: dict) -> str:
    whole = {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}
    r = httpx.post(f"{url}/v1/chat/completions", json=whole, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_epd_pd_uses_e_embeddings_and_answers_like_a_default_instance(tmp_path: Path) -> None:
    from agentic_kvc.epd import real
    from agentic_kvc.epd.tiny_vlm import build_tiny_vlm

    model = build_tiny_vlm(tmp_path / "tiny-vlm")
    with real.start(model, tmp_path / "logs") as setup:
        e_log, pd_log = setup.fleet.log_path(0), setup.fleet.log_path(1)
        images = [real.image_url(seed) for seed in (1, 2)]
        bodies = [real.chat_body(img, "what is this?", 12) for img in images]
        via_epd = [_text(setup.epd_url, b) for b in bodies]
        direct = [_text(setup.default_urls[0], b) for b in bodies]
        # Greedy, same dummy weights: PD fed E's embeddings answers as an instance that encoded
        # the image itself. Weak on its own: the random-weight model's tokens may decode to ""
        # (seen 2026-11-24), hence the log checks below.
        assert via_epd == direct
        # ... and PD did use E's embeddings: E stored each image once, PD loaded each once.
        stored = re.findall(r"EC stored (\w+)", e_log.read_text())
        loaded = re.findall(r"EC loaded (\w+)", pd_log.read_text())
        assert len(stored) == 2 and sorted(loaded) == sorted(stored)

        # Streaming through the proxy, several at once: all complete.
        async def many() -> list[int]:
            async with httpx.AsyncClient(timeout=300) as c:
                got = await asyncio.gather(
                    *(
                        real._one(c, setup.epd_url, real.chat_body(real.image_url(10 + i), "hi", 8))
                        for i in range(3)
                    )
                )
            return [g.get("output_tokens", 0) for g in got]

        assert asyncio.run(many()) == [8, 8, 8]
        assert len(re.findall(r"EC loaded", pd_log.read_text())) == 5
        assert setup.proxy.routed == 5 and set(setup.proxy.router.load().values()) == {0}
