"""Fakes for the proxy's PD logic: vLLM-like servers that speak the kv_transfer_params handshake.

Only the proxy's own logic is tested against these (what goes to P and D, records, fallback);
the real handshake is tested on real engines in tests/integration/test_real_vllm_pd.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from agentic_kvc.proxy.fake_engine import FakeVLLM, Send, _reply
from agentic_kvc.proxy.server import ProxyThread, ServerThread


class PDFake(FakeVLLM):
    """A fake engine with a KV connector: as P it answers `do_remote_decode` with one token and
    the params D needs; as D it answers like any request (vLLM's usage, too, counts only D's
    local prefix hit as cached, not the pulled KV)."""

    def __init__(self, engine_id: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.engine_id = engine_id
        self.prefill_status = 200  # != 200: the prefill leg fails with this status
        self.return_params = True

    async def _generate(self, path: str, body: dict[str, Any], send: Send) -> None:
        params = body.get("kv_transfer_params") or {}
        if params.get("do_remote_decode"):
            self.requests.append(body)
            if self.prefill_status != 200:
                await _reply(send, self.prefill_status, b'{"error": "prefill broke"}')
                return
            prompt = body["prompt"]
            cached = self._cached_tokens(prompt)
            out: dict[str, Any] = {
                "id": "cmpl-p",
                "object": "text_completion",
                "choices": [{"index": 0, "text": " tok", "finish_reason": "length"}],
                "usage": {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": 1,
                    "total_tokens": len(prompt) + 1,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            }
            if self.return_params:
                out["kv_transfer_params"] = {
                    "do_remote_prefill": True,
                    "do_remote_decode": False,
                    "remote_engine_id": self.engine_id,
                    "remote_block_ids": [[1, 2, 3]],
                    "remote_host": "127.0.0.1",
                    "remote_port": 5600,
                }
            await _reply(send, 200, json.dumps(out).encode())
            return
        await super()._generate(path, body, send)


Fakes = list[tuple[PDFake, ServerThread]]


ProxyFactory = Callable[..., tuple[ProxyThread, httpx.Client]]


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
