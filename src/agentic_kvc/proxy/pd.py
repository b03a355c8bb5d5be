"""Prefill/decode disaggregation: the prefill leg of a PD-routed request.

Seam with the request path (`proxy/app.py`): when `decision.disaggregated`, the proxy calls
`run_prefill(...)` on the prefill instance, then `RouterState.prefill_done`, then sends
`PrefillResult.decode_body` to the decode instance through its ordinary (streaming or not)
path, so decode timing, records and errors are handled in one place.

This is the minimal version of the vLLM NIXL flow (`kv_transfer_params` with
`do_remote_decode` on P's request; P's response carries the params for D). The PD engineer
owns this module and may replace the body of `run_prefill`; the signature is the contract.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from agentic_kvc.proxy.backends import BackendClient


class PrefillError(RuntimeError):
    """The prefill instance answered, but not with something a decode can start from."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class PrefillResult:
    decode_body: dict[str, Any]  # the request to send to the decode instance
    kv_transfer_tokens: int | None = None  # prompt tokens whose KV moved P -> D, if known


async def run_prefill(
    prefill: BackendClient,
    path: str,
    body: dict[str, Any],
    request_id: str,
    timeout_s: float,
) -> PrefillResult:
    """Run the prompt's prefill on `prefill` and return the decode instance's request.

    Raises the `backends.CONNECTION_ERRORS` when P refuses or drops (the caller marks P
    unhealthy), `asyncio.TimeoutError` past `timeout_s`, and `PrefillError` otherwise.
    """
    assert prefill.session is not None
    p_body = copy.deepcopy(body)
    p_body.update(
        stream=False,
        max_tokens=1,
        kv_transfer_params={
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        },
    )
    p_body.pop("stream_options", None)
    p_body.pop("max_completion_tokens", None)
    async with prefill.session.post(
        path,
        data=msgspec.json.encode(p_body),
        headers={"content-type": "application/json", "x-request-id": request_id},
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    ) as resp:
        raw = await resp.read()
    if resp.status != 200:
        raise PrefillError(f"prefill instance answered HTTP {resp.status}: {raw[:200]!r}")
    answer = msgspec.json.decode(raw)
    params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
    d_body = dict(body)
    if params:
        d_body["kv_transfer_params"] = params
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return PrefillResult(decode_body=d_body, kv_transfer_tokens=tokens)
