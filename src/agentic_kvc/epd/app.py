"""The EPD proxy as a server: `akvc epd proxy --encoder URL ... --pd URL ...`.

A small ASGI app around `epd/proxy.py`: `POST /v1/completions` and `/v1/chat/completions` go to
one E (least outstanding encodes), then to one PD (least outstanding requests), whose answer
(streamed when the client asks) is the client's. `GET /health` answers 200 with the route
loads; `GET /v1/models` is the first PD's. An E that fails (connection or non-2xx) gives the
client a 502 naming it, and PD is not asked. Kept apart from `proxy/app.py` (the policy proxy
over interchangeable instances) because E and PD are not interchangeable and no routing
policy applies to them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

from agentic_kvc.epd.proxy import EncodeError, EPDRouter, forward, forward_stream
from agentic_kvc.proxy.asgi import run_lifespan

log = logging.getLogger(__name__)
GENERATE = ("/v1/completions", "/v1/chat/completions")


def _error(message: str, code: int) -> bytes:
    kind = "bad_request" if code < 500 else "upstream_error"
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


async def _reply(send: Any, status: int, body: bytes, ctype: bytes = b"application/json") -> None:
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read(receive: Any) -> bytes:
    parts, more = [], True
    while more:
        msg = await receive()
        parts.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    return b"".join(parts)


class EPDApp:
    def __init__(
        self,
        encoders: list[str],
        pds: list[str],
        concurrent: bool = False,
        timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,  # tests: fake hosts
    ) -> None:
        self.router = EPDRouter([u.rstrip("/") for u in encoders], [u.rstrip("/") for u in pds])
        self.concurrent = concurrent
        self._client_kw: dict[str, Any] = {"timeout": timeout_s, "transport": transport}
        self.client: httpx.AsyncClient | None = None
        self.routed = 0

    def _http(self) -> httpx.AsyncClient:
        if self.client is None:  # lazily too, for servers run without lifespan
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
            self.client = httpx.AsyncClient(limits=limits, **self._client_kw)
        return self.client

    async def _close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, shutdown=self._close)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "GET" and path == "/health":
            body = {"encoders": self.router.encoders, "pds": self.router.pds}
            body["load"], body["routed"] = self.router.load(), self.routed
            await _reply(send, 200, json.dumps(body).encode())
        elif method == "GET" and path == "/v1/models":
            r = await self._http().get(f"{self.router.pds[0]}/v1/models")
            await _reply(send, r.status_code, r.content)
        elif method == "POST" and path in GENERATE:
            await self._generate(path, await _read(receive), send)
        else:
            await _reply(send, 404, _error(f"no route {method} {path}", 404))

    async def _generate(self, path: str, raw: bytes, send: Any) -> None:
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            await _reply(send, 400, _error(f"bad request body: {exc}", 400))
            return
        self.routed += 1
        started = False
        try:
            if not body.get("stream"):
                answer, _ = await forward(self._http(), self.router, path, body, self.concurrent)
                await _reply(send, 200, json.dumps(answer).encode())
                return
            gen = forward_stream(self._http(), self.router, path, body, self.concurrent)
            async for status, _, chunk in gen:
                if not started:
                    ctype = b"text/event-stream" if status < 300 else b"application/json"
                    head = {"status": status, "headers": [(b"content-type", ctype)]}
                    await send({"type": "http.response.start", **head})
                    started = True
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except EncodeError as exc:
            await _reply(send, 502, _error(str(exc), 502))
        except httpx.HTTPStatusError as exc:
            r = exc.response
            await _reply(send, r.status_code, r.content)
        except httpx.HTTPError as exc:
            log.warning("EPD request failed: %s", exc)
            if started:  # PD's stream broke midway: end it; the client sees no [DONE]
                await send({"type": "http.response.body", "body": b""})
            else:
                await _reply(send, 502, _error(f"{type(exc).__name__}: {exc}", 502))
