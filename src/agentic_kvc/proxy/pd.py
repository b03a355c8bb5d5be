"""Prefill/decode disaggregation: the prefill leg of a PD-routed request, and its request shapes.

Seam with the request path (`proxy/app.py`): when `decision.disaggregated`, the proxy calls
`run_prefill(...)` on the prefill instance P, then `RouterState.prefill_done`, then sends
`PrefillResult.decode_body` to the decode instance D through its ordinary (streaming or not)
path, so decode timing, records and errors are handled in one place. If P fails, the proxy
runs the request colocated on D instead and records why (`colocated_class` names its class).

The flow is vLLM's disaggregated-serving proxy protocol (`kv_transfer_params`):
- NIXL: P gets the request with `max_tokens: 1` and `do_remote_decode: true`; it prefills,
  keeps the blocks and answers with the params D needs (`remote_engine_id`, `remote_block_ids`,
  `remote_host`, `remote_port`, ...). D gets the full request with those params, pulls the
  blocks it does not already hold over NIXL, recomputes the last token and decodes.
- Mooncake: the router names the transfer: P gets `do_remote_decode` and a `transfer_id`; D
  gets `do_remote_prefill`, the same `transfer_id`, P's `remote_engine_id` and the address of
  P's bootstrap server (`remote_bootstrap_addr`), where D looks up P's workers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from agentic_kvc.proxy.engine_clients import EngineClient

Connector = Literal["nixl", "mooncake"]
CONNECTORS: tuple[str, ...] = ("nixl", "mooncake")
# What P must not see: it answers with one token, whole (its stream would only be discarded).
_PREFILL_DROP = ("stream_options", "max_completion_tokens", "min_tokens", "n", "best_of")


class PrefillError(RuntimeError):
    """The prefill instance answered, but not with something a decode can start from."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class PrefillResult:
    decode_body: dict[str, Any]  # the request to send to the decode instance
    kv_transfer_tokens: int | None = None  # prompt tokens P prefilled (an upper bound on KV moved)
    prefill_cached_tokens: int | None = None  # P's own prefix-cache hit (its usage)
    kv_transfer_params: dict[str, Any] | None = None  # what D was given


def prefill_body(
    body: dict[str, Any], connector: Connector = "nixl", transfer_id: str | None = None
) -> dict[str, Any]:
    """P's request: the client's, cut to one token, asking P to keep the KV for a remote decode."""
    if connector not in CONNECTORS:
        raise ValueError(f"kv connector {connector!r}: expected one of {list(CONNECTORS)}")
    p_body = copy.deepcopy(body)
    for key in _PREFILL_DROP:
        p_body.pop(key, None)
    params: dict[str, Any]
    if connector == "nixl":
        params = {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        }
    else:
        if not transfer_id:
            raise ValueError("the Mooncake connector needs a transfer_id for the prefill")
        params = {"do_remote_decode": True, "transfer_id": transfer_id}
    p_body.update(stream=False, max_tokens=1, kv_transfer_params=params)
    return p_body


def decode_body(
    body: dict[str, Any],
    connector: Connector,
    prefill_params: dict[str, Any] | None,
    peer: dict[str, str] | None = None,
    transfer_id: str | None = None,
) -> dict[str, Any]:
    """D's request: the client's whole request plus the params that make D pull P's KV.

    NIXL takes the params from P's answer as they are; Mooncake builds them from P's identity
    (`peer`: `engine_id`, `bootstrap_addr`) and the transfer id the router chose.
    """
    d_body = dict(body)  # shallow: only the params key is added
    if connector == "nixl":
        if not prefill_params:
            raise PrefillError(
                "prefill instance returned no kv_transfer_params (started without a KV "
                "connector, or as kv_consumer?)"
            )
        d_body["kv_transfer_params"] = prefill_params
    elif connector == "mooncake":
        if not peer or "engine_id" not in peer or "bootstrap_addr" not in peer:
            raise ValueError("the Mooncake connector needs P's engine_id and bootstrap_addr")
        if not transfer_id:
            raise ValueError("the Mooncake connector needs the prefill's transfer_id")
        d_body["kv_transfer_params"] = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": peer["engine_id"],
            "remote_bootstrap_addr": peer["bootstrap_addr"],
            "transfer_id": transfer_id,
        }
    else:
        raise ValueError(f"kv connector {connector!r}: expected one of {list(CONNECTORS)}")
    return d_body


def colocated_class(route_class: str) -> str:
    """The route class a PD decision gets when it runs colocated after all (P failed)."""
    if route_class == "HEAVY_P2P":
        return "HEAVY_COLO"
    if route_class == "PD":
        return "COLOCATED"
    return route_class.removesuffix("_P2P")


def _usage_ints(answer: Any) -> tuple[int | None, int | None]:
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return None, None
    prompt = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (
        prompt if isinstance(prompt, int) else None,
        cached if isinstance(cached, int) else None,
    )


async def run_prefill(
    prefill: EngineClient,
    path: str,
    body: dict[str, Any],
    request_id: str,
    timeout_s: float,
    connector: Connector = "nixl",
    peer: dict[str, str] | None = None,
) -> PrefillResult:
    """Run the prompt's prefill on `prefill` and return the decode instance's request.

    `peer` is P's Mooncake identity (unused by NIXL). Raises the `engine_clients.CONNECTION_ERRORS`
    when P refuses or drops, `TimeoutError` past `timeout_s`, and `PrefillError` otherwise.
    """
    assert prefill.pool is not None
    transfer_id = f"akvc-{request_id}" if connector == "mooncake" else None
    p_body = prefill_body(body, connector, transfer_id)
    status, raw = await prefill.pool.fetch(
        "POST",
        path,
        msgspec.json.encode(p_body),
        {"content-type": "application/json", "x-request-id": request_id},
        timeout_s,
    )
    if status != 200:
        raise PrefillError(f"prefill instance answered HTTP {status}: {raw[:200]!r}")
    try:
        answer = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise PrefillError(f"prefill answer is not JSON: {exc}") from exc
    params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
    d_body = decode_body(body, connector, params, peer, transfer_id)
    prompt, cached = _usage_ints(answer)
    return PrefillResult(
        decode_body=d_body,
        kv_transfer_tokens=prompt,
        prefill_cached_tokens=cached,
        kv_transfer_params=d_body["kv_transfer_params"],
    )
