"""EPD request flow: a request goes to an encode instance (E), then (or concurrently) to a
prefill-decode instance (PD); several of each.

The router is pure (no I/O): E by least outstanding encodes, PD by least outstanding requests,
ties by order. `forward` / `forward_stream` do the HTTP: E gets the request with `max_tokens=1`
(it only encodes; its answer is empty), PD the original (streamed back when it asks for it).
Both carry `ec_transfer_params` naming the shared request id and the pair (the design's push
connector announces the embeddings to that PD; vLLM ignores the field, and the vLLM connector
`epd/vllm_ec_connector.py` finds them by content hash instead).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentic_kvc.proxy.pd import _PREFILL_DROP


@dataclass
class EPDRouter:
    encoders: list[str]
    pds: list[str]
    _e_load: dict[str, int] = field(init=False)
    _pd_load: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        if not self.encoders or not self.pds:
            raise ValueError("EPD needs at least one E and one PD instance")
        self._e_load = dict.fromkeys(self.encoders, 0)
        self._pd_load = dict.fromkeys(self.pds, 0)

    def pick(self) -> tuple[str, str]:
        e = min(self.encoders, key=lambda u: self._e_load[u])
        pd = min(self.pds, key=lambda u: self._pd_load[u])
        self._e_load[e] += 1
        self._pd_load[pd] += 1
        return e, pd

    def encode_done(self, e: str) -> None:
        self._e_load[e] -= 1

    def request_done(self, pd: str) -> None:
        self._pd_load[pd] -= 1

    def load(self) -> dict[str, int]:
        return {**self._e_load, **self._pd_load}


class EncodeError(RuntimeError):
    """E did not answer 2xx: the request never reaches PD (its image was not encoded)."""

    def __init__(self, encoder: str, status: int, text: str) -> None:
        super().__init__(f"encoder {encoder} answered {status}: {text[:300]}")
        self.encoder, self.status = encoder, status


def route_bodies(
    body: dict[str, Any], e: str, pd: str
) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """(route, E's body, PD's body) for one request sent to the pair (e, pd)."""
    rid = body.get("request_id") or f"epd-{uuid.uuid4().hex}"
    params = {"request_id": rid, "encoder": e, "pd": pd}
    e_body = {**body, "max_tokens": 1, "stream": False, "ec_transfer_params": params}
    for key in _PREFILL_DROP:  # E answers one token, whole: what a PD prefill leg drops
        e_body.pop(key, None)
    pd_body = {**body, "ec_transfer_params": params}
    return params, e_body, pd_body


async def encode(
    client: httpx.AsyncClient, router: EPDRouter, e: str, path: str, body: dict
) -> None:
    """E's leg; its load is released however it ends."""
    try:
        r = await client.post(f"{e}{path}", json=body)
        if r.status_code >= 300:
            raise EncodeError(e, r.status_code, r.text)
    finally:
        router.encode_done(e)


async def forward(
    client: httpx.AsyncClient,
    router: EPDRouter,
    path: str,
    body: dict[str, Any],
    concurrent: bool = False,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Send one non-streaming request through E and PD; PD's JSON answer and the route."""
    e, pd = router.pick()
    route, e_body, pd_body = route_bodies(body, e, pd)
    try:
        if concurrent:  # the design's API-server variant: PD waits for the embeddings itself
            _, r = await asyncio.gather(
                encode(client, router, e, path, e_body), client.post(f"{pd}{path}", json=pd_body)
            )
        else:
            await encode(client, router, e, path, e_body)
            r = await client.post(f"{pd}{path}", json=pd_body)
        r.raise_for_status()
        return r.json(), route
    finally:
        router.request_done(pd)


async def forward_stream(
    client: httpx.AsyncClient,
    router: EPDRouter,
    path: str,
    body: dict[str, Any],
    concurrent: bool = False,
) -> AsyncIterator[tuple[int, dict[str, str], bytes]]:
    """Like `forward`, but yields PD's response as it comes: (status, route, chunk), the
    first item with an empty chunk once PD's status is known. Sequential mode encodes first."""
    e, pd = router.pick()
    route, e_body, pd_body = route_bodies(body, e, pd)
    e_task = None
    try:
        if concurrent:
            e_task = asyncio.ensure_future(encode(client, router, e, path, e_body))
        else:
            await encode(client, router, e, path, e_body)
        async with client.stream("POST", f"{pd}{path}", json=pd_body) as r:
            yield r.status_code, route, b""
            async for chunk in r.aiter_raw():
                yield r.status_code, route, chunk
        if e_task is not None:
            await e_task
    finally:
        if e_task is not None and not e_task.done():
            e_task.cancel()
        router.request_done(pd)
