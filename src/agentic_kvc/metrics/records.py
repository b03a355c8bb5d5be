"""The per-request and per-instance record schema shared by real and simulated runs.

Times are seconds. `t_*` fields are on the run's own clock (seconds since the run started);
`arrival_s` is when the workload says the request arrives (open loop) or was released by its
session (closed loop). Derived latencies follow `vllm bench serve`:
TTFT = t_first_token - t_proxy_recv; E2E = t_done - t_proxy_recv;
TPOT = (E2E - TTFT) / (output_tokens - 1) for output_tokens > 1.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

ROUTE_CLASSES = (
    "COLOCATED",
    "WARM",
    "MEDIUM",
    "HEAVY",
    "HEAVY_COLO",
    "HEAVY_P2P",
    "PD",
    "WARM_P2P",  # a non-HEAVY request prefilled elsewhere (static PD, conditional disagg)
    "MEDIUM_P2P",
)


# Request fields written only when set, so records of runs without them keep their bytes.
_REQUEST_OMIT = frozenset(
    {
        "session_source",
        "parent_session_id",
        "host_tokens",
        "disk_tokens",
        "recomputed_tokens",
        "reload_wait_s",
        "predicted_host_tokens",
        "predicted_disk_tokens",
    }
)


_LEAF_TYPES = frozenset({int, float, str, bool, type(None)})


def _plain(value: Any) -> Any:
    """`dataclasses.asdict`'s conversion of one field's value, without its `copy.deepcopy` of
    every immutable leaf: containers are copied (lists, dicts, tuples, nested dataclasses as
    dicts), leaves kept. A run writes a record per request and a sample per instance and
    scrape: `asdict` took 0.34 s of a ~3 s simulated Mooncake run for them, this 0.06 s."""
    t = type(value)
    if t in _LEAF_TYPES:
        return value
    if t is list:
        return [_plain(v) for v in value]
    if t is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if t is tuple:
        return tuple(_plain(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return copy.deepcopy(value)  # anything else as `asdict` does it


def _fields_dict(
    obj: Any, names: tuple[str, ...], omit_when_none: frozenset[str]
) -> dict[str, Any]:
    """`asdict(obj)` without the fields in `omit_when_none` that are None (field order kept)."""
    out: dict[str, Any] = {}
    for name in names:
        v = getattr(obj, name)
        if type(v) in _LEAF_TYPES:
            if v is None and name in omit_when_none:
                continue
            out[name] = v
        else:
            out[name] = _plain(v)
    return out


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    session_id: str
    turn: int
    arrival_s: float
    input_tokens: int
    output_tokens: int = 0
    cached_tokens: int = 0  # actual prefix-cache hit tokens (engine-reported when known)
    predicted_cached_tokens: int | None = None  # what the router's cache view predicted
    cache_view: str | None = None
    policy: str = ""
    route_class: str = ""
    reason: str = ""
    prefill_instance: int | None = None
    decode_instance: int | None = None
    t_proxy_recv: float | None = None
    t_prefill_sent: float | None = None
    t_prefill_done: float | None = None
    t_first_token: float | None = None
    t_done: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    kv_transfer_tokens: int | None = None
    kv_transfer_s: float | None = None
    # PD execution (proxy/pd.py). For a PD request `cached_tokens` is P's prefix hit (what
    # `predicted_cached_tokens` predicts); D's usage counts its local hit plus the pulled KV.
    prefill_cached_tokens: int | None = None
    decode_cached_tokens: int | None = None
    predicted_decode_cached_tokens: int | None = None  # D's local prefix hit, by the view
    pd_fallback: str | None = None  # why a PD decision ran colocated on D instead
    scores: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # Where the proxy found the session id (proxy/session.py: config, header:<name>,
    # body:<field>, prefix) and the parent session a subagent's request names. Written only
    # when set, so records without them (simulated runs, older files) keep their bytes.
    session_source: str | None = None
    parent_session_id: str | None = None
    # KV tiers below HBM (issue 29), written only when a run has them: prompt tokens loaded
    # from host memory and from disk (after the HBM hit, `cached_tokens`), the tokens
    # prefilled (recomputed: input - HBM - host - disk), and seconds the request waited for
    # its loads (link queue and transfer). For PD: the prefill side's.
    host_tokens: int | None = None
    disk_tokens: int | None = None
    recomputed_tokens: int | None = None
    reload_wait_s: float | None = None
    # Real runs whose exact view knows tiers (issue 30): the prompt tokens the view expected
    # the prefill instance to load from host memory / disk, beside the engine's `cached_tokens`
    # (its HBM hit plus those loads).
    predicted_host_tokens: int | None = None
    predicted_disk_tokens: int | None = None

    def finalize(self) -> RequestRecord:
        """Fill the derived latencies from the timestamps (idempotent)."""
        if self.t_proxy_recv is not None and self.t_first_token is not None:
            self.ttft_s = self.t_first_token - self.t_proxy_recv
        if self.t_proxy_recv is not None and self.t_done is not None:
            self.e2e_s = self.t_done - self.t_proxy_recv
        if self.ttft_s is not None and self.e2e_s is not None and self.output_tokens > 1:
            self.tpot_s = (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)
        return self

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self, _REQUEST_FIELDS, _REQUEST_OMIT)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(slots=True)
class InstanceSample:
    t: float
    instance: int
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    external_prefix_cache_hits: float | None = None
    preemptions: float | None = None
    router_inflight: int | None = None
    router_pending_prefill_tokens: int | None = None
    healthy: bool = True
    # KV tiers (issue 29): the share of the host tier / disk store in use; written only when
    # a run has the tier.
    host_kv_usage: float | None = None
    disk_kv_usage: float | None = None
    # Real engines with a tier (issue 30): the engine's own counters of prompt tokens its
    # prefix cache got from host memory / disk since it started
    # (`vllm:prompt_tokens_cached_by_source_total`); written only when the engine reports one.
    host_cached_tokens: float | None = None
    disk_cached_tokens: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self, _SAMPLE_FIELDS, _SAMPLE_OMIT)


_REQUEST_FIELDS = tuple(f.name for f in fields(RequestRecord))
_SAMPLE_FIELDS = tuple(f.name for f in fields(InstanceSample))
# Written only when set, so runs without the tiers keep their bytes.
_SAMPLE_OMIT = frozenset(
    {"host_kv_usage", "disk_kv_usage", "host_cached_tokens", "disk_cached_tokens"}
)
