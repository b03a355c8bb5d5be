"""EPD request flow: a request goes to an encode instance (E), then (or concurrently) to a
prefill-decode instance (PD); several of each.

The router is pure (no I/O): E by least outstanding encodes, PD by least outstanding requests,
ties by order. `forward` does the HTTP: E gets the request with `max_tokens=1` (it only
encodes; its answer is empty), PD the original. Both carry `ec_transfer_params` naming the
shared request id and the pair, so E's connector announces the embeddings to that PD.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx


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


async def forward(
    client: httpx.AsyncClient,
    router: EPDRouter,
    path: str,
    body: dict[str, Any],
    concurrent: bool = False,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Send one non-streaming request through E and PD; PD's JSON answer and the route."""
    e, pd = router.pick()
    rid = body.get("request_id") or f"epd-{uuid.uuid4().hex}"
    params = {"request_id": rid, "encoder": e, "pd": pd}
    e_body = {**body, "max_tokens": 1, "stream": False, "ec_transfer_params": params}
    pd_body = {**body, "ec_transfer_params": params}

    async def to_e() -> None:
        try:
            r = await client.post(f"{e}{path}", json=e_body)
            r.raise_for_status()
        finally:
            router.encode_done(e)

    try:
        if concurrent:  # the design's API-server variant: PD waits for the embeddings itself
            _, r = await asyncio.gather(to_e(), client.post(f"{pd}{path}", json=pd_body))
        else:
            await to_e()
            r = await client.post(f"{pd}{path}", json=pd_body)
        r.raise_for_status()
        return r.json(), {"request_id": rid, "encoder": e, "pd": pd}
    finally:
        router.request_done(pd)
