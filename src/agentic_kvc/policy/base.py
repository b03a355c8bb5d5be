"""What a policy sees and what it returns.

A policy is a small, deterministic object: `decide(request, fleet) -> Decision`. It does no I/O
and reads no clock (the fleet view carries `now`). It may keep tiny deterministic state of its
own, such as a round-robin counter. Everything it knows about the instances comes from a
`FleetView`, which the real proxy and the simulator build the same way (see `fleet.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict

Role = Literal["combined", "prefill", "decode", "both"]


@dataclass(slots=True)
class InstanceView:
    """One instance as a router can know it.

    The first group is the router's own in-flight accounting (always fresh); the second is
    scraped from the engine's /metrics and may be stale (`scrape_age_s`) or missing (None).
    """

    index: int
    healthy: bool = True
    role: Role = "combined"
    num_requests: int = 0  # routed here and not finished (prefill or decode)
    pending_prefill_tokens: int = 0  # uncached prompt tokens routed, first token not yet seen
    decode_requests: int = 0  # past first token, not finished
    decode_tokens: int = 0  # KV tokens held by the decoding requests (prompt + generated)
    engine_running: int | None = None
    engine_waiting: int | None = None
    kv_usage: float | None = None
    scrape_age_s: float | None = None
    # Tier reloads the router routed here and has not yet seen finish (first token): prompt
    # tokens predicted to come from host memory / disk. The link's queue as the router can
    # know it (issue 29); always 0 without KV tiers.
    pending_host_reload_tokens: int = 0
    pending_disk_reload_tokens: int = 0

    @property
    def ongoing_tokens(self) -> int:
        """The seeds' `ongoing_tokens`: prefill still to do plus KV held by decodes."""
        return self.pending_prefill_tokens + self.decode_tokens

    @property
    def can_prefill(self) -> bool:
        return self.role != "decode"

    @property
    def can_decode(self) -> bool:
        return self.role != "prefill"


@dataclass(slots=True, frozen=True)
class RequestView:
    request_id: str
    session_id: str | None
    turn: int
    input_tokens: int
    output_tokens: int
    block_hashes: Sequence[int] = ()  # router hashes of the prompt's full blocks, in order
    block_size: int = 16
    # The session's finish signal: True on its last turn (an agent framework that says so),
    # False when more turns follow, None when the client does not say.
    last_turn: bool | None = None


@dataclass(slots=True, frozen=True)
class TierHits:
    """Where one instance holds a prompt's leading tokens, by KV tier (issue 29).

    Contiguous and in this order, as vLLM takes them: `hbm` leading tokens from its GPU prefix
    cache, then the `host` tokens after them from host memory, then the `disk` tokens after
    those (the scheduler asks the offloading connector for the rest of the prompt after the
    HBM hit). Everything after hbm + host + disk is recomputed.
    """

    hbm: int
    host: int = 0
    disk: int = 0

    @property
    def total(self) -> int:
        return self.hbm + self.host + self.disk

    def capped(self, cap: int) -> TierHits:
        """At most `cap` tokens in all, taken in tier order (vLLM's last-token rule)."""
        if self.hbm + self.host + self.disk <= cap:
            return self
        hbm = min(self.hbm, cap)
        host = min(self.host, cap - hbm)
        return TierHits(hbm, host, min(self.disk, cap - hbm - host))


class CacheView(Protocol):
    """A prefix-cache view: for a request, how many leading tokens each instance holds.

    `matched_tokens` is the HBM hit. A view that knows tiers below HBM also has
    `tier_hits(request, n_instances) -> list[TierHits]` (its `hbm` equal to `matched_tokens`);
    `FleetView.tier_hits` asks it when present and reports HBM only otherwise.
    """

    def matched_tokens(self, request: RequestView, n_instances: int) -> list[int]: ...


def colocating(instances: Sequence[InstanceView]) -> list[InstanceView]:
    """The healthy instances that can run both phases of a request."""
    return [i for i in instances if i.healthy and i.can_prefill and i.can_decode]


@dataclass(slots=True)
class FleetView:
    instances: Sequence[InstanceView]
    cache: CacheView | None = None
    affinity: Mapping[str, int] = field(default_factory=dict)
    session_turns: Mapping[str, int] = field(default_factory=dict)
    now: float = 0.0
    _matched: dict[str, list[int]] = field(default_factory=dict)
    _tiers: dict[str, list[TierHits]] = field(default_factory=dict)
    # The healthy instances able to run both phases, as `RouterState` keeps them between
    # health changes (None: `colocated_candidates` filters `instances` itself). Read-only.
    colocated: Sequence[InstanceView] | None = None

    def cached_tokens(self, request: RequestView) -> list[int]:
        """Cached prefix tokens per instance, computed once per request.

        Capped at input_tokens - 1, as in vLLM: the last prompt token is always recomputed
        so that the engine has logits to sample from.
        """
        got = self._matched.get(request.request_id)
        if got is None:
            n = len(self.instances)
            raw = self.cache.matched_tokens(request, n) if self.cache is not None else [0] * n
            cap = max(request.input_tokens - 1, 0)
            got = [x if x < cap else cap for x in raw]  # min(), without a call per instance
            self._matched[request.request_id] = got
        return got

    def cached_tokens_on(self, request: RequestView, index: int) -> int:
        """`cached_tokens(request)[index]`, asking the cache view about that instance only
        (when it can) if the whole list was not needed yet: a cache-blind policy's receipt
        names the chosen instance's hit without probing the rest of a large fleet."""
        got = self._matched.get(request.request_id)
        if got is not None:
            return got[index]
        one = getattr(self.cache, "matched_tokens_at", None)
        if one is None:
            return self.cached_tokens(request)[index]
        return min(one(request, index), max(request.input_tokens - 1, 0))

    def tier_hits(self, request: RequestView) -> list[TierHits]:
        """Per instance, the prompt's leading tokens held in HBM, then host, then disk,
        computed once per request and capped at input_tokens - 1 in all (as `cached_tokens`).
        A cache view without tiers gives `TierHits(cached_tokens, 0, 0)`."""
        got = self._tiers.get(request.request_id)
        if got is None:
            ask = getattr(self.cache, "tier_hits", None)
            if ask is None:
                got = [TierHits(h) for h in self.cached_tokens(request)]
            else:
                cap = max(request.input_tokens - 1, 0)
                got = [t.capped(cap) for t in ask(request, len(self.instances))]
                # The HBM hit is the same answer whichever way it is asked.
                self._matched.setdefault(request.request_id, [t.hbm for t in got])
            self._tiers[request.request_id] = got
        return got

    @property
    def knows_tiers(self) -> bool:
        """Whether the cache view reports tiers below HBM (else every hit is HBM)."""
        return getattr(self.cache, "tier_hits", None) is not None

    def healthy(self) -> list[InstanceView]:
        return [i for i in self.instances if i.healthy]

    def prefill_candidates(self) -> list[InstanceView]:
        return [i for i in self.instances if i.healthy and i.can_prefill]

    def decode_candidates(self) -> list[InstanceView]:
        return [i for i in self.instances if i.healthy and i.can_decode]


@dataclass(slots=True)
class Decision:
    """Where to run a request and why: the route receipt."""

    prefill: int
    decode: int
    route_class: str
    reason: str
    policy: str = ""
    predicted_cached_tokens: int = 0  # on the prefill instance, by the cache view used
    scores: dict[int, Any] = field(default_factory=dict)
    # Prompt tokens the prefill instance is predicted to reload from host memory / disk (after
    # its HBM hit): not prefilled, so not counted as pending prefill; they are the link's
    # queue until the first token (RouterState). Not in the receipt (records carry the
    # engine's own per-tier counts).
    predicted_host_tokens: int = 0
    predicted_disk_tokens: int = 0

    @property
    def disaggregated(self) -> bool:
        return self.prefill != self.decode

    def receipt(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "route_class": self.route_class,
            "reason": self.reason,
            "prefill_instance": self.prefill,
            "decode_instance": self.decode,
            "predicted_cached_tokens": self.predicted_cached_tokens,
            "scores": _str_keys(self.scores),
        }


# str(k) for instance indices, shared: a fleet-scale run keeps a score per instance in every
# record, and a fresh key string each would cost ~50 bytes apiece.
_KEYS: dict[int, str] = {k: str(k) for k in range(1024)}


def _str_keys(scores: dict[int, Any]) -> dict[str, Any]:
    """`{str(k): v}`, the keys shared; one C-level pass when every key is a known index."""
    try:
        return dict(zip(map(_KEYS.__getitem__, scores), scores.values(), strict=True))
    except KeyError:
        return {_key(k): v for k, v in scores.items()}


def _key(k: int) -> str:
    if type(k) is int and 0 <= k < 1 << 16:
        got = _KEYS.get(k)
        if got is None:
            got = _KEYS[k] = str(k)
        return got
    return str(k)


class PolicyParams(BaseModel):
    """Base of every policy's parameters: unknown keys are errors, not silent defaults."""

    model_config = ConfigDict(extra="forbid")

    def fleet_problem(self, instances: int) -> str | None:
        """Why these parameters cannot route over `instances` instances (None: they can).
        A run config asks before its run starts; the policy asks again of the fleet it sees."""
        return None


class NoParams(PolicyParams):
    pass


class NoHealthyInstance(RuntimeError):
    """Raised when no instance can serve the request; backends turn it into a request error."""


class Policy(ABC):
    """Base class: subclasses set `name`, optionally `Params`, and implement `decide`."""

    name: ClassVar[str]
    Params: ClassVar[type[PolicyParams]] = NoParams
    description: ClassVar[str] = ""
    # False: the policy never asks `fleet.cached_tokens*` (not even for its receipt), so a
    # backend may skip keeping the router's prefix index (the simulator then builds none;
    # every built-in policy reads it, at least for the receipt's predicted hit).
    uses_cache_view: ClassVar[bool] = True
    # False: the policy never asks `fleet.tier_hits` or `fleet.knows_tiers` (it routes on the
    # HBM hit alone), so a backend may skip keeping the router's model of the KV tiers below
    # HBM (the simulator then keeps the HBM estimate only: the same decisions, less work).
    uses_tier_view: ClassVar[bool] = True

    def __init__(self, params: BaseModel | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @abstractmethod
    def decide(self, request: RequestView, fleet: FleetView) -> Decision: ...
