"""A tiny in-process OpenAI-style streaming server for replayer tests (no real engine)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class FakeEngine:
    """Streams `max_tokens` chunks `token_delay_s` apart; behaviour switches per request."""

    token_delay_s: float = 0.005
    first_delay_s: float = 0.01
    fail_status: dict[str, int] = field(default_factory=dict)  # request id -> HTTP status
    drop_after: dict[str, int] = field(default_factory=dict)  # request id -> chunks then cut
    hang: set[str] = field(default_factory=set)  # request ids that never answer
    seen: list[dict[str, Any]] = field(default_factory=list)  # bodies, headers, times
    inflight: int = 0
    max_inflight_sessions: int = 0
    _sessions: dict[str, int] = field(default_factory=dict)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid = request.headers.get("x-request-id", "")
        sid = request.headers.get("x-session-id", "")
        last = request.headers.get("x-session-last-turn")
        self.seen.append(
            {"t": time.monotonic(), "id": rid, "session": sid, "last": last, "body": body}
        )
        if rid in self.fail_status:
            return web.json_response({"error": "boom"}, status=self.fail_status[rid])
        if rid in self.hang:
            await asyncio.sleep(3600)
        self._sessions[sid] = self._sessions.get(sid, 0) + 1
        self.max_inflight_sessions = max(self.max_inflight_sessions, len(self._sessions))
        try:
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            resp.headers["x-akvc-receipt"] = json.dumps(
                {
                    "policy": "fake",
                    "route_class": "WARM",
                    "reason": "test",
                    "prefill_instance": 1,
                    "decode_instance": 1,
                    "predicted_cached_tokens": 7,
                    "scores": {"1": 0.5},
                }
            )
            await resp.prepare(request)
            await asyncio.sleep(self.first_delay_s)
            n = int(body["max_tokens"])
            for k in range(n):
                if rid in self.drop_after and k >= self.drop_after[rid]:
                    # Abort the connection mid-stream, as a crashed engine would.
                    assert request.transport is not None
                    request.transport.close()
                    return resp
                if k:
                    await asyncio.sleep(self.token_delay_s)
                chunk = {"choices": [{"index": 0, "text": f"t{k} "}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {
                "prompt_tokens": len(body["prompt"]),
                "completion_tokens": n,
                "prompt_tokens_details": {"cached_tokens": 3},
            }
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            self._sessions[sid] -= 1
            if not self._sessions[sid]:
                del self._sessions[sid]

    async def start(self) -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.2)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner, f"http://127.0.0.1:{port}"
