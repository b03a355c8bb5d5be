"""Hand-built fleet views for policy tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentic_kvc.policy.base import FleetView, InstanceView, RequestView


@dataclass
class FixedCache:
    """A cache view that answers from a table: instance -> cached leading tokens."""

    cached: Mapping[int, int] = field(default_factory=dict)

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]:
        return [self.cached.get(i, 0) for i in range(n_instances)]


def fleet(
    n: int,
    cached: Mapping[int, int] | None = None,
    affinity: Mapping[str, int] | None = None,
    **per_instance: Sequence[object],
) -> FleetView:
    """n instances; keyword lists set InstanceView fields per instance (e.g. num_requests=[...])."""
    insts = []
    for i in range(n):
        kw = {k: v[i] for k, v in per_instance.items()}
        insts.append(InstanceView(index=i, **kw))  # type: ignore[arg-type]
    return FleetView(
        instances=insts,
        cache=FixedCache(cached or {}),
        affinity=dict(affinity or {}),
    )


_counter = iter(range(10**9))


def req(
    input_tokens: int = 1000,
    session: str | None = "s",
    output_tokens: int = 16,
    turn: int = 1,
) -> RequestView:
    return RequestView(
        request_id=f"r{next(_counter)}",
        session_id=session,
        turn=turn,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )
