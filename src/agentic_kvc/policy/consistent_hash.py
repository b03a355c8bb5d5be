"""`consistent_hash`: a hash ring on the session id (vLLM production-stack `session`,
vllm-router `consistent_hash`).

Each instance owns `virtual_nodes` points on a 64-bit ring; a session goes to the first point
clockwise from its key's hash whose instance is healthy and able to serve, so losing an
instance only moves that instance's sessions. Requests without a session id hash their request
id. Purely sticky: no load term, which is how it can lock a saturated engine into a
preemption spiral (see shared/notes/routing_anchors.md).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView
from agentic_kvc.policy.common import ColocatingPolicy, StrictParams
from agentic_kvc.policy.registry import register


def _h64(text: str) -> int:
    # A stable hash (Python's hash() is salted per process).
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class ConsistentHashParams(StrictParams):
    virtual_nodes: int = Field(100, ge=1, le=10_000, description="Ring points per instance.")


@register
class ConsistentHash(ColocatingPolicy):
    name = "consistent_hash"
    Params = ConsistentHashParams
    description = "Hash ring on the session id (request id without one); no load term."

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._ring_n = -1
        self._points: list[int] = []
        self._owners: list[int] = []

    def _ring(self, n: int) -> None:
        if n == self._ring_n:
            return
        vn = self.params.virtual_nodes  # type: ignore[attr-defined]
        pts = sorted((_h64(f"instance-{i}#{v}"), i) for i in range(n) for v in range(vn))
        self._points = [p for p, _ in pts]
        self._owners = [i for _, i in pts]
        self._ring_n = n

    def choose(
        self, request: RequestView, fleet: FleetView, candidates: Sequence[InstanceView]
    ) -> tuple[InstanceView, str, dict[int, Any]]:
        n = len(fleet.instances)
        self._ring(n)
        ok = {i.index: i for i in candidates}
        key = _h64(request.session_id or request.request_id)
        start = bisect.bisect_left(self._points, key)
        total = len(self._points)
        for step in range(total):
            owner = self._owners[(start + step) % total]
            if owner in ok:
                reason = "ring" if step == 0 else "ring_skip_unavailable"
                return ok[owner], reason, {owner: key}
        raise AssertionError(
            "unreachable: candidates is non-empty and every instance is on the ring"
        )
