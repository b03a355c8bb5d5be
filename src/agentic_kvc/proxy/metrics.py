"""The proxy's own Prometheus metrics (served on its `/metrics`).

Counters and the overhead histogram are updated on the request path, so their label children
are looked up once and cached (a `.labels()` call costs microseconds). Per-instance state
(in-flight requests, pending prefill tokens, health, last scrape) is not updated per request
at all: a custom collector reads `RouterState` and the engine clients when `/metrics` is
scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from agentic_kvc.policy.fleet import RouterState
from agentic_kvc.proxy.engine_clients import EngineClient

# Router overhead is tens of microseconds to a few milliseconds: fine buckets there.
OVERHEAD_BUCKETS = (
    25e-6, 50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 750e-6,
    1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 10e-3, 25e-3, 100e-3,
)  # fmt: skip


class _FleetCollector(Collector):
    def __init__(self, state: RouterState, engines: Sequence[EngineClient]) -> None:
        self.state = state
        self.engines = engines

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}

        def fam(name: str, doc: str) -> GaugeMetricFamily:
            if name not in families:
                families[name] = GaugeMetricFamily(name, doc, labels=["instance", "url"])
            return families[name]

        for inst, e in zip(self.state.instances, self.engines, strict=True):
            labels = [str(inst.index), e.url]
            fam("akvc_proxy_engine_healthy", "1 if the engine is in service").add_metric(
                labels, 1.0 if inst.healthy else 0.0
            )
            fam("akvc_proxy_inflight_requests", "Requests routed and not finished").add_metric(
                labels, inst.num_requests
            )
            fam(
                "akvc_proxy_pending_prefill_tokens",
                "Uncached prompt tokens routed whose first token has not arrived",
            ).add_metric(labels, inst.pending_prefill_tokens)
            fam("akvc_proxy_decode_requests", "Requests past first token").add_metric(
                labels, inst.decode_requests
            )
            fam("akvc_proxy_decode_tokens", "KV tokens held by decoding requests").add_metric(
                labels, inst.decode_tokens
            )
            for attr, name in (
                ("engine_running", "akvc_proxy_engine_running"),
                ("engine_waiting", "akvc_proxy_engine_waiting"),
                ("kv_usage", "akvc_proxy_engine_kv_usage"),
            ):
                value = getattr(inst, attr)
                if value is not None:
                    fam(name, f"Engine {attr} from the last scrape").add_metric(labels, value)
        yield from families.values()


class _CostModelCollector(Collector):
    """The online cost model's state (`predicted_ttft` with `cost_model: online`,
    profiles/online.py), read from the router state's stream observer when scraped; nothing
    when no policy fits one."""

    def __init__(self, state: RouterState) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fit = getattr(self.state.observer, "fit", None)
        if fit is None:
            return
        snap = fit.snapshot()
        for key, name, doc in (
            ("coef", "akvc_proxy_cost_model_coefficient", "Fitted step cost term (s per unit)"),
            ("coef_sd", "akvc_proxy_cost_model_coefficient_sd", "Its standard error"),
        ):
            g = GaugeMetricFamily(name, doc, labels=["term"])
            for term, value in snap[key].items():
                g.add_metric([term], value)
            yield g
        err = GaugeMetricFamily(
            "akvc_proxy_cost_model_rel_error",
            "Recent relative error of the fit's predictions before each update, by kind",
            labels=["kind"],
        )
        n = GaugeMetricFamily(
            "akvc_proxy_cost_model_observations", "Observations fitted, by kind", labels=["kind"]
        )
        dropped = GaugeMetricFamily(
            "akvc_proxy_cost_model_dropped",
            "Observations not fitted, by reason (decode_burst: a mean inter-token gap below "
            "the fit's lower bound on a step, i.e. a delivery burst)",
            labels=["reason"],
        )
        for kind, value in snap["rel_error"].items():
            err.add_metric([kind], value)
        for kind, count in snap["observations"].items():
            n.add_metric([kind], count)
        for reason, count in snap.get("dropped", {}).items():
            dropped.add_metric([reason], count)
        yield err
        yield n
        yield dropped


# (memo, units reused, units done anew, bytes held): tokens, or blocks for block_hashes.
MemoStats = tuple[str, int, int, int]


class _MemoCollector(Collector):
    """The prompt memos (a session's next turn tokenized, read and hashed only where it adds
    to its last; docs/proxy.md), read when scraped: nothing on the request path."""

    def __init__(self, memos: Callable[[], Iterable[MemoStats]]) -> None:
        self.memos = memos

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        unit = "tokens (block_hashes: blocks)"
        reused = CounterMetricFamily(
            "akvc_proxy_prompt_memo_reused", f"Prompt {unit} a memo saved redoing", labels=["memo"]
        )
        new = CounterMetricFamily(
            "akvc_proxy_prompt_memo_new", f"Prompt {unit} done anew", labels=["memo"]
        )
        held = GaugeMetricFamily("akvc_proxy_prompt_memo_bytes", "Memory held", labels=["memo"])
        for name, n_reused, n_new, nbytes in self.memos():
            reused.add_metric([name], n_reused)
            new.add_metric([name], n_new)
            held.add_metric([name], nbytes)
        yield reused
        yield new
        yield held


class ProxyMetrics:
    def __init__(
        self,
        policy: str,
        state: RouterState,
        engines: Sequence[EngineClient],
        memos: Callable[[], Iterable[MemoStats]] | None = None,
    ) -> None:
        self.policy = policy
        self.registry = CollectorRegistry(auto_describe=False)
        self.decisions = Counter(
            "akvc_proxy_decisions",
            "Routing decisions by policy, route class and reason",
            ["policy", "route_class", "reason"],
            registry=self.registry,
        )
        self.requests = Counter(
            "akvc_proxy_requests",
            "Requests handled, by endpoint and outcome",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.engine_errors = Counter(
            "akvc_proxy_engine_errors",
            "Requests that failed on an engine (refused, dropped, timed out, bad answer)",
            ["instance", "kind"],
            registry=self.registry,
        )
        self.overhead = Histogram(
            "akvc_proxy_overhead_seconds",
            "Router overhead: request received to request sent upstream "
            "(parse, tokenize, hash, decide, account)",
            buckets=OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_FleetCollector(state, engines))
        self.registry.register(_CostModelCollector(state))
        if memos is not None:
            self.registry.register(_MemoCollector(memos))
        self._decision_children: dict[tuple[str, str], Any] = {}
        self._request_children: dict[tuple[str, str], Any] = {}

    def decision(self, route_class: str, reason: str) -> None:
        key = (route_class, reason)
        child = self._decision_children.get(key)
        if child is None:
            child = self._decision_children[key] = self.decisions.labels(
                self.policy, route_class, reason
            )
        child.inc()

    def request(self, endpoint: str, outcome: str) -> None:
        key = (endpoint, outcome)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(endpoint, outcome)
        child.inc()

    def engine_error(self, instance: int, kind: str) -> None:
        self.engine_errors.labels(str(instance), kind).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
