"""The proxy as a plain ASGI application: routing, accounting, streaming relay, records.

A raw ASGI callable rather than a framework app: the request path is a handful of awaits, and
a framework's request objects, middleware stack and per-response task groups would add tens
to hundreds of microseconds per request, which is the budget this proxy is measured against.

Life of a generation request (`/v1/completions`, `/v1/chat/completions`, and `/v1/messages`,
the Anthropic Messages API, read as the chat request vLLM makes of it: anthropic.py):

    receive -> parse JSON -> session id -> prompt token ids -> block hashes [-> prefix session]
            -> policy.decide(request, fleet view)
            [PD: RouterState.admit -> pd.run_prefill on P                  (t_prefill_sent)
                 -> RouterState.prefill_done]                               (t_prefill_done)
            -> POST to the (decode) engine [colocated: -> RouterState.admit] (t_prefill_sent)
            -> relay bytes; first event with choices (Messages API: first delta)
               -> RouterState.first_token                                   (t_first_token)
            -> end of stream -> RouterState.finish -> record                (t_done)

A colocated request is admitted just after it is written upstream, before the proxy waits for
anything (`_Admission`): what the next decision sees is the same as if it were admitted first,
and the request does not wait for the router's bookkeeping.

Every exit path (client error, upstream error, client gone, timeout) goes through `finish`,
so the in-flight accounting a policy sees never leaks a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from agentic_kvc.cache.kv_events import ExactCacheView, KVEventSubscriber
from agentic_kvc.metrics.prometheus import EngineMetrics
from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.policy.base import Decision, FleetView, NoHealthyInstance, RequestView
from agentic_kvc.policy.fleet import RouterState, Ticket
from agentic_kvc.policy.registry import get_policy
from agentic_kvc.proxy import pd
from agentic_kvc.proxy.anthropic import COUNT_TOKENS_PATH, MESSAGES_PATH
from agentic_kvc.proxy.asgi import Message, Receive, Scope, Send, run_lifespan
from agentic_kvc.proxy.cache_view import make_estimated_index, make_hasher, with_engine_tier
from agentic_kvc.proxy.engine_clients import CONNECTION_ERRORS, EngineClient, EngineMonitor
from agentic_kvc.proxy.ids_memo import PromptIdsMemo
from agentic_kvc.proxy.metrics import MemoStats, ProxyMetrics
from agentic_kvc.proxy.openapi import OPENAPI
from agentic_kvc.proxy.prompt import PromptTokenizer, parse_request, prompt_tokens
from agentic_kvc.proxy.records import RecordSink
from agentic_kvc.proxy.session import SOURCE_PREFIX, PrefixSessions, identify
from agentic_kvc.proxy.settings import ProxySettings
from agentic_kvc.proxy.stream import StreamTracker
from agentic_kvc.proxy.upstream import UpstreamAbandoned, UpstreamRefused, UpstreamResponse

log = logging.getLogger("agentic_kvc.proxy")

DEFAULT_BLOCK_SIZE = 16  # vLLM's default on GPUs; replaced by the engine's cache_config_info
COMPLETIONS = "/v1/completions"  # the endpoint of token-id prompts (proxy/ids_memo.py)
GENERATE_PATHS = frozenset([COMPLETIONS, "/v1/chat/completions", MESSAGES_PATH])
JSON = b"application/json"
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
# The `vllm_xargs` key the engines' release-first plugin reads (serve/vllm_release_first.py's
# XARG; serve imports proxy, so it is spelled here too, and a test holds the two equal).
RELEASE_FIRST_XARG = "akvc_release_first"
_clock = time.monotonic
# In `http.response.start`: write the head with the first body bytes (proxy/server.py).
HOLD_HEADERS = "akvc.hold_headers"


class _Retry(Exception):
    """The chosen engine refused the connection before the request reached it."""


class _Admission:
    """One routed request's entry into the router's state (`ProxyApp._admit`), made once.

    A colocated request is admitted right after it is written upstream (`on_sent`, which the
    upstream client calls before any wait, so no other request is routed in between and every
    decision still sees all earlier ones): the bookkeeping then runs while the engine works
    instead of delaying the request. A PD request is admitted before its prefill, which waits.
    """

    __slots__ = ("_app", "_ticket", "decision", "fleet", "rec", "release_first", "request")

    def __init__(
        self,
        app: ProxyApp,
        request: RequestView,
        decision: Decision,
        fleet: FleetView,
        rec: RequestRecord,
    ) -> None:
        self._app = app
        self.request = request
        self.decision = decision
        self.fleet = fleet
        self.rec = rec
        # Finished sessions first: the decode engine frees the last turn's KV to the head of
        # its free queue (serve/vllm_release_first.py); `finish` tells the estimated view.
        self.release_first = app.settings.finish_first and request.last_turn is True
        self._ticket: Ticket | None = None

    @property
    def admitted(self) -> bool:
        return self._ticket is not None

    @property
    def ticket(self) -> Ticket:
        assert self._ticket is not None, "used before admission"
        return self._ticket

    @ticket.setter
    def ticket(self, ticket: Ticket) -> None:
        self._ticket = ticket

    def on_sent(self) -> None:
        """The request is on its way upstream (or about to wait for a connection): stamp it
        and admit it."""
        app, rec = self._app, self.rec
        rec.t_prefill_sent = app.now()
        app.metrics.overhead.observe(rec.t_prefill_sent - (rec.t_proxy_recv or 0.0))
        self._ticket = app._admit(self)


def error_body(message: str, kind: str, code: int) -> bytes:
    """An OpenAI-style error object."""
    return _encode({"error": {"message": message, "type": kind, "param": None, "code": code}})


def _sse_error(message: str, kind: str, code: int, messages_api: bool = False) -> bytes:
    if messages_api:  # the Messages API's error event
        err = _encode({"type": "error", "error": {"type": kind, "message": message}})
        return b"event: error\ndata: " + err + b"\n\n"
    return b"data: " + error_body(message, kind, code) + b"\n\ndata: [DONE]\n\n"


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


async def _read_body(receive: Receive) -> bytes:
    msg = await receive()
    body = msg.get("body", b"")
    if not msg.get("more_body"):
        return body  # the usual case: one message, no copy
    parts = [body]
    while msg.get("more_body"):
        msg = await receive()
        parts.append(msg.get("body", b""))
    return b"".join(parts)


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = JSON,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if extra:
        headers.extend(extra)
    await send(
        {"type": "http.response.start", "status": status, "headers": headers, HOLD_HEADERS: True}
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _say_profile(policy: Any, params: Mapping[str, Any]) -> None:
    """Warn when a policy that prices engine steps by a hardware profile runs on its default
    one: the proxy cannot tell what its engines are (the simulator hands the fleet's own)."""
    fields = type(policy.params).model_fields
    if "hardware" in fields and "hardware" not in params:
        log.warning(
            "%s prices engine steps with its default profile (%s / %s); pass --param "
            "hardware=... --param model=... for these engines (the vLLM CPU engine: cpu-tiny / "
            "tiny)",
            policy.name,
            policy.params.hardware,
            policy.params.model,
        )


class ProxyApp:
    """ASGI app; `create_app(settings)` builds one. Start/stop run through ASGI lifespan."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.policy = get_policy(settings.policy, settings.params)
        _say_profile(self.policy, settings.params)
        n = len(settings.engines)
        self.engines = [
            EngineClient(i, url, settings.connect_timeout_s, settings.max_idle_connections)
            for i, url in enumerate(settings.engines)
        ]
        self.block_size = settings.block_size or DEFAULT_BLOCK_SIZE
        self._block_size_known = settings.block_size is not None
        self._capacity_blocks: int | None = None
        self.hasher = make_hasher(self.block_size, settings.token_memo_mib)
        self.kv_events: KVEventSubscriber | None = None
        # `--tier-view`, for a policy that reads tiers: the HBM estimate grows a model of the
        # engines' tier below HBM when their metrics state it (`_learn_tier`).
        self._tier_view = settings.tier_view and self.policy.uses_tier_view
        self._tier_blocks: int | None = None
        if settings.cache_view == "exact":
            # The exact view learns from the engines' KV events, never from the router's routes.
            exact = settings.exact_cache or ExactCacheView(n, self.block_size)
            self.state = RouterState(
                n, settings.roles, exact, record_on_route=False, max_sessions=settings.max_sessions
            )
            if settings.kv_events:
                self.kv_events = KVEventSubscriber(exact, settings.kv_events)
        else:
            self.state = RouterState(
                n,
                settings.roles,
                make_estimated_index(n, tiers=self._tier_view),
                max_sessions=settings.max_sessions,
            )
        # A policy fitting its cost model online watches the streams (profiles/online.py).
        self.state.observer = getattr(self.policy, "stream_observer", None)
        memo = settings.token_memo_mib
        self.tokenizer = (
            PromptTokenizer.find(settings.tokenizer, memo_mib=memo) if settings.tokenizer else None
        )
        self.ids_memo = PromptIdsMemo(memo)  # a token-id turn read from its last turn's end
        # Requests with no session id get one from their prompt (proxy/session.py).
        self.prefix_sessions = PrefixSessions() if settings.prefix_sessions else None
        self.metrics = ProxyMetrics(settings.policy, self.state, self.engines, self._memo_stats)
        self.records = RecordSink(settings.records, settings.on_record)
        self.monitor = EngineMonitor(
            self.engines,
            settings.scrape_interval_s,
            settings.health_interval_s,
            on_health=lambda e, ok: self._set_health(e, ok, "health probe"),
            on_scrape=self._on_scrape,
            failures_to_mark_out=settings.health_failures,
        )
        self.origin = settings.clock_origin if settings.clock_origin is not None else _clock()
        self.started = False
        self._api_key = settings.api_key.encode() if settings.api_key else None
        # Request ids without one from the client: 32 hex digits like a uuid4's, a random
        # half per proxy process and a counter (uuid4() per request cost a getrandom() system
        # call and a UUID object, 2-3% of the proxy's CPU samples per request on a real engine;
        # benchmarks/proxy_cpu.py).
        self._id_prefix = uuid.uuid4().hex[:16]
        self._id_counter = itertools.count()

    # ---- lifecycle -------------------------------------------------------------------

    async def startup(self) -> None:
        if self.kv_events is not None:
            await self.kv_events.start()  # before any traffic: events sent earlier are lost
        for e in self.engines:
            e.open()
        # Learn block size, health and the model (for its tokenizer) before the first request.
        await asyncio.gather(*(self._first_contact(e) for e in self.engines))
        self.monitor.start()
        self.records.start()
        self.started = True

    async def shutdown(self) -> None:
        await self.monitor.stop()
        if self.kv_events is not None:
            await self.kv_events.stop()
        await self.records.close()
        for e in self.engines:
            await e.close()
        self.started = False

    async def _first_contact(self, e: EngineClient) -> None:
        timeout = min(self.settings.connect_timeout_s, 5.0)
        m = await e.scrape(timeout)
        if m is None:
            self._set_health(e, False, "unreachable at startup")
            return
        self._on_scrape(e, m)
        try:
            status, raw = await e.get("/v1/models", timeout)
            data = _decode(raw)["data"][0] if status == 200 else {}
        except (*CONNECTION_ERRORS, TimeoutError, msgspec.DecodeError, KeyError, IndexError):
            data = {}
        e.model_id, e.model_root = data.get("id"), data.get("root")
        if self.tokenizer is None:
            memo = self.settings.token_memo_mib
            self.tokenizer = PromptTokenizer.find(e.model_root, e.model_id, memo_mib=memo)
            if self.tokenizer is not None:
                log.info("tokenizer for text prompts: %s", self.tokenizer.path)

    def _set_health(self, e: EngineClient, healthy: bool, why: str) -> None:
        if e.healthy != healthy:
            state = "back in service" if healthy else "out of service"
            log.warning("engine %d (%s) %s: %s", e.index, e.url, state, why)
        e.healthy = healthy
        self.state.set_healthy(e.index, healthy)
        if not healthy:
            self.monitor.poke(e.index)

    def _on_scrape(self, e: EngineClient, m: EngineMetrics) -> None:
        self.state.update_scrape(e.index, self.now(), m.running, m.waiting, m.kv_usage)
        estimated = self.settings.cache_view == "estimated"
        if m.block_size and not self._block_size_known:
            self._block_size_known = True
            if m.block_size != self.block_size:
                # Routes recorded with the wrong block size would never match: start afresh.
                self.block_size = m.block_size
                self.hasher = make_hasher(m.block_size, self.settings.token_memo_mib)
                if estimated:
                    self.state.cache = make_estimated_index(
                        len(self.engines), tiers=self._tier_view
                    )
                    self._tier_blocks = None
            set_size = getattr(self.state.cache, "set_block_size", None)
            if set_size is not None:  # the exact view keys events by the engine's block size
                set_size(m.block_size)
        if m.num_gpu_blocks and estimated and self._capacity_blocks is None:
            # The estimate evicts like an engine of this KV size (LRU, whole blocks).
            self._capacity_blocks = m.num_gpu_blocks
            self.state.cache.capacity_blocks = m.num_gpu_blocks  # type: ignore[union-attr]
        if estimated and self._tier_view and m.offload_blocks:
            self._learn_tier(e, m)

    def _learn_tier(self, e: EngineClient, m: EngineMetrics) -> None:
        """Model the tier below HBM that an engine's metrics state (`--tier-view`): at the
        first engine that states one; a later engine stating another size is logged."""
        if self._tier_blocks is None:
            tiered = with_engine_tier(
                self.state.cache,  # type: ignore[arg-type]
                m,
                self.settings.engine_max_num_batched_tokens,
            )
            if tiered is None:
                return
            self._tier_blocks = m.offload_blocks
            self.state.cache = tiered
            log.info(
                "estimated view: engine %d states a %s tier of %d blocks (%s); modelled on "
                "every engine (store at free: %s)",
                e.index,
                m.offload_backend,
                m.offload_blocks,
                "lazy" if m.offload_lazy else "every computed block",
                tiered.store_at_free,
            )
        elif m.offload_blocks != self._tier_blocks:
            log.warning(
                "engine %d states a tier of %d blocks, the estimated view models %d",
                e.index,
                m.offload_blocks,
                self._tier_blocks,
            )
            self._tier_blocks = m.offload_blocks  # said once per change, not every scrape

    def now(self) -> float:
        return _clock() - self.origin

    # ---- ASGI ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            path, method = scope["path"], scope["method"]
            if (
                self._api_key is not None
                and path.startswith("/v1/")
                and not self._authorized(scope)
            ):
                # /health and /metrics stay open: probes and scrapers carry no key.
                msg = "missing or wrong API key (Authorization: Bearer <key>)"
                await _respond(send, 401, error_body(msg, "authentication_error", 401))
                return
            if path in GENERATE_PATHS:
                if method != "POST":
                    await _respond(send, 405, error_body("use POST", "invalid_request_error", 405))
                    return
                await self._generate(scope, receive, send, path)
            elif method == "GET" and path == "/health":
                await self._health(send)
            elif method == "GET" and path == "/metrics":
                await _respond(send, 200, self.metrics.render(), b"text/plain; version=0.0.4")
            elif method == "GET" and path == "/v1/models":
                await self._models(send)
            elif method == "POST" and path == COUNT_TOKENS_PATH:
                await self._count_tokens(receive, send)
            elif method == "GET" and path == "/openapi.json":
                await _respond(send, 200, _encode(OPENAPI))
            else:
                msg = f"no route for {method} {path}"
                await _respond(send, 404, error_body(msg, "not_found_error", 404))
        elif kind == "lifespan":
            await run_lifespan(receive, send, self.startup, self.shutdown)

    def _authorized(self, scope: Scope) -> bool:
        got = _header(scope["headers"], b"authorization") or b""
        return hmac.compare_digest(got, b"Bearer " + self._api_key)  # type: ignore[operator]

    async def _health(self, send: Send) -> None:
        engines = [{"url": e.url, "healthy": e.healthy} for e in self.engines]
        ok = any(e.healthy for e in self.engines)
        body = _encode({"status": "ok" if ok else "no healthy engine", "engines": engines})
        await _respond(send, 200 if ok else 503, body)

    async def _models(self, send: Send) -> None:
        for e in self.engines:
            if not e.healthy:
                continue
            try:
                status, raw = await e.get("/v1/models", self.settings.connect_timeout_s)
            except TimeoutError:
                continue  # slow under load is not down: the monitor decides that (issue 15)
            except CONNECTION_ERRORS as exc:
                self._set_health(e, False, f"/v1/models: {type(exc).__name__}")
                continue
            await _respond(send, status, raw)
            return
        await _respond(send, 503, error_body("no healthy engine", "service_unavailable", 503))

    async def _count_tokens(self, receive: Receive, send: Send) -> None:
        """The Messages API's token count, from the first healthy engine (nothing routed)."""
        raw = await _read_body(receive)
        headers = {"content-type": "application/json"}
        for e in self.engines:
            if not e.healthy or e.pool is None:
                continue
            try:
                resp = await e.pool.request(
                    "POST", COUNT_TOKENS_PATH, raw, headers, self.settings.connect_timeout_s
                )
                try:
                    data = await resp.read()
                finally:
                    resp.release()
            except (*CONNECTION_ERRORS, TimeoutError, UpstreamRefused):
                continue
            await _respond(send, resp.status, data)
            return
        await _respond(send, 503, error_body("no healthy engine", "service_unavailable", 503))

    def _memo_stats(self) -> Iterator[MemoStats]:
        """The prompt memos' counters, for /metrics (the hasher and tokenizer may be replaced
        at startup, once the engines' block size and model are known)."""
        ids = self.ids_memo
        yield "token_ids", ids.reused_tokens, ids.read_tokens, ids.nbytes
        h = self.hasher
        yield "block_hashes", h.reused_blocks, h.hashed_blocks, h.nbytes
        if self.tokenizer is not None:
            m = self.tokenizer.memo
            yield "tokenizer", m.reused_tokens, m.encoded_tokens, m.nbytes

    # ---- generation ------------------------------------------------------------------

    async def _generate(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        t_recv = self.now()
        raw = await _read_body(receive)
        try:
            body, parsed_tokens = parse_request(raw, self.ids_memo if path == COMPLETIONS else None)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:  # (fuzzing)
            await self._reject(send, path, 400, f"request body is not valid JSON: {exc}")
            return
        if not isinstance(body, dict):
            await self._reject(send, path, 400, "request body must be a JSON object")
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        rid_header = _header(headers, b"x-request-id")
        request_id = (
            rid_header.decode("latin-1")
            if rid_header
            else f"{self._id_prefix}{next(self._id_counter):016x}"
        )
        try:
            ident = identify(body, headers, self.settings.session_header)
        except ValueError as exc:  # a finish signal that is not a boolean
            await self._reject(send, path, 400, str(exc))
            return
        session = ident.session
        try:
            token_ids, n_input = prompt_tokens(path, body, self.tokenizer, parsed_tokens)
        except Exception as exc:  # a tokenizer or template failure is the request's fault
            await self._reject(send, path, 400, f"cannot read the prompt: {exc}")
            return
        if n_input == 0:
            need = "prompt" if path == "/v1/completions" else "messages"
            await self._reject(send, path, 400, f"request has no usable '{need}'")
            return
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 0:
            await self._reject(send, path, 400, "max_tokens must be a non-negative integer")
            return
        stream = body.get("stream") is True
        payload: bytes | None = raw
        drop_usage = False
        if stream and path != MESSAGES_PATH:  # (the Messages API's stream has usage)
            opts = body.get("stream_options")
            if opts is not None and not isinstance(opts, dict):  # found by fuzzing: was a 500
                await self._reject(send, path, 400, "stream_options must be an object")
                return
            if not (isinstance(opts, dict) and opts.get("include_usage")):
                # Usage gives exact output and cached-token counts; the client did not ask
                # for it, so its event is dropped again on the way back.
                body["stream_options"] = {**(opts or {}), "include_usage": True}
                drop_usage, payload = True, None
        try:
            hashes = (
                self.hasher.hash(session, token_ids) if token_ids is not None and n_input else ()
            )
        except (OverflowError, ValueError, TypeError) as exc:  # token ids beyond int64 (fuzzing)
            await self._reject(send, path, 400, f"prompt token ids out of range: {exc}")
            return
        source = ident.source
        if self.prefix_sessions is not None and hashes:
            if session is None:  # no id anywhere: the prompt names its session
                session, source = self.prefix_sessions.derive(hashes), SOURCE_PREFIX
            self.prefix_sessions.remember(hashes, session)  # type: ignore[arg-type]
        turn = self.state.session_turns.get(session, 0) if session is not None else 0
        request = RequestView(
            request_id, session, turn, n_input, max_tokens, hashes, self.block_size, ident.last_turn
        )
        rec = RequestRecord(
            request_id=request_id,
            session_id=session or "",
            session_source=source,
            parent_session_id=ident.parent,
            turn=turn,
            arrival_s=t_recv,
            input_tokens=n_input,
            cache_view=self.settings.cache_view,
            policy=self.settings.policy,
            t_proxy_recv=t_recv,
        )
        retries = 1 if self.settings.retry_refused else 0
        while True:
            try:
                fleet = self.state.view(self.now())
                decision = self.policy.decide(request, fleet)
            except NoHealthyInstance as exc:
                rec.error = f"no healthy instance: {exc}"
                self.records.add(rec)
                await self._reject(send, path, 503, rec.error, "service_unavailable")
                return
            decision.policy = decision.policy or self.settings.policy
            admission = _Admission(self, request, decision, fleet, rec)
            try:
                await self._execute(
                    path, body, payload, stream, drop_usage, rec, admission, receive, send
                )
                return
            except _Retry:
                ticket = admission.ticket  # (the upstream client admits before it raises)
                if retries == 0:
                    await self._fail(send, path, rec, ticket, 502, rec.error or "refused")
                    return
                retries -= 1
                ticket.release_first = False  # the refused engine never held the prompt
                self.state.finish(ticket)
                if session is not None:  # the refused attempt was not a turn
                    self.state.session_turns[session] -= 1
                rec.error = None

    async def _reject(
        self, send: Send, path: str, status: int, message: str, kind: str = "invalid_request_error"
    ) -> None:
        self.metrics.request(path, f"http_{status}")
        await _respond(send, status, error_body(message, kind, status))

    async def _fail(
        self, send: Send, path: str, rec: RequestRecord, ticket: Ticket, status: int, message: str
    ) -> None:
        """End a request that got no upstream response: release, record, clean JSON error."""
        self.state.finish(ticket)
        rec.error = message
        rec.t_done = self.now()
        self.records.add(rec)
        kind = "timeout" if status == 504 else "upstream_error"
        await self._reject(send, path, status, message, kind)

    def _admit(self, admission: _Admission) -> Ticket:
        """Enter a routed request in the router's state, its record and the decision metric."""
        request, decision, fleet, rec = (
            admission.request,
            admission.decision,
            admission.fleet,
            admission.rec,
        )
        if fleet.knows_tiers:  # what the view expects from each tier below HBM (issue 30)
            # Asked before `admit`, which records the prompt in an estimated view. A view that
            # holds nothing below HBM (engines without offloading: no event with a host or
            # disk medium) would answer 0 and 0 after another walk of the prompt on every
            # request; a policy that asked already has its answer cached.
            below = getattr(fleet.cache, "holds_below_hbm", None)
            if below is None or below():
                hits = fleet.tier_hits(request)[decision.prefill]
                rec.predicted_host_tokens, rec.predicted_disk_tokens = hits.host, hits.disk
            else:
                rec.predicted_host_tokens = rec.predicted_disk_tokens = 0
        ticket = self.state.admit(request, decision, self.now())
        ticket.release_first = admission.release_first
        _fill_decision(rec, decision)
        if decision.disaggregated:  # D's own prefix hit: what it need not pull from P
            rec.predicted_decode_cached_tokens = fleet.cached_tokens(request)[decision.decode]
        self.metrics.decision(decision.route_class, decision.reason)
        return ticket

    def _engine_failed(self, e: EngineClient, exc: BaseException, where: str) -> str:
        kind = type(exc).__name__
        self.metrics.engine_error(e.index, kind)
        self._set_health(e, False, f"{where}: {kind}: {exc}")
        return f"engine {e.index} ({e.url}) {where}: {kind}: {exc}"

    async def _execute(
        self,
        path: str,
        body: dict[str, Any],
        payload: bytes | None,
        stream: bool,
        drop_usage: bool,
        rec: RequestRecord,
        admission: _Admission,
        receive: Receive,
        send: Send,
    ) -> None:
        decision = admission.decision
        pd_done = False
        if decision.disaggregated and path == MESSAGES_PATH:
            # vLLM's Messages API answer carries no KV transfer parameters for a decode leg.
            admission.on_sent()
            why = "the Messages API has no prefill/decode split here"
            admission.ticket = self._colocate_on_decode(admission.ticket, rec, why)
            decision = admission.ticket.decision
        target = self.engines[decision.decode]
        if decision.disaggregated:
            admission.on_sent()  # before the prefill's wait, in which others are routed
            ticket = admission.ticket
            prefill = self.engines[decision.prefill]
            peers = self.settings.kv_peers
            fallback: str | None = None
            try:
                result = await pd.run_prefill(
                    prefill,
                    path,
                    body,
                    rec.request_id,
                    self.settings.upstream_timeout_s,
                    self.settings.kv_connector,
                    peers[decision.prefill] if peers else None,
                )
            except TimeoutError:
                fallback = "prefill timed out"
            except CONNECTION_ERRORS as exc:
                fallback = self._engine_failed(prefill, exc, "failed the prefill")
            except pd.PrefillError as exc:
                fallback = f"prefill failed: {exc}"
            if fallback is not None:
                # D can still do the whole request: run it colocated there, and say why.
                ticket = admission.ticket = self._colocate_on_decode(ticket, rec, fallback)
                decision = ticket.decision
            else:
                self.state.prefill_done(ticket, self.now())
                rec.t_prefill_done = self.now()
                rec.kv_transfer_tokens = result.kv_transfer_tokens
                rec.prefill_cached_tokens = result.prefill_cached_tokens
                d_body = result.decode_body  # (P's request never carries the ask, as in sim)
                payload = _encode(_with_release_first(d_body) if ticket.release_first else d_body)
                pd_done = True
        if not pd_done:  # colocated, or D alone after a failed prefill
            if admission.release_first:
                payload = _encode(_with_release_first(body))
            elif payload is None:
                payload = _encode(body)
        assert target.pool is not None
        up_headers = {"content-type": "application/json", "x-request-id": rec.request_id}
        # Colocated: the request is admitted right after it is written, while the engine works.
        on_sent = None if admission.admitted else admission.on_sent
        try:
            resp = await target.pool.request(
                "POST", path, payload, up_headers, self.settings.upstream_timeout_s, on_sent
            )
        except UpstreamRefused as exc:
            ticket = admission.ticket
            rec.error = self._engine_failed(target, exc, "refused the connection")
            if pd_done or rec.pd_fallback:  # P did (or failed) its part: no second routing
                await self._fail(send, path, rec, ticket, 502, rec.error)
                return
            raise _Retry from exc
        except TimeoutError:
            await self._fail(send, path, rec, admission.ticket, 504, "upstream timed out")
            return
        except CONNECTION_ERRORS as exc:
            # No response byte reached the client yet (typically a pooled keep-alive connection
            # to an engine that just died), so another engine can take the request.
            ticket = admission.ticket
            rec.error = self._engine_failed(target, exc, "dropped the request")
            if pd_done or rec.pd_fallback:
                await self._fail(send, path, rec, ticket, 502, rec.error)
                return
            raise _Retry from exc
        ticket = admission.ticket
        prefill, decode = str(decision.prefill).encode(), str(decision.decode).encode()
        headers = [
            (b"content-type", resp.headers.get(b"content-type", JSON)),
            (b"x-akvc-request-id", rec.request_id.encode()),
            (b"x-akvc-policy", decision.policy.encode()),
            (b"x-akvc-route-class", decision.route_class.encode()),
            (b"x-akvc-reason", decision.reason.encode()),
            (b"x-akvc-prefill", prefill),
            (b"x-akvc-decode", decode),
            (b"x-akvc-predicted-cached-tokens", str(decision.predicted_cached_tokens).encode()),
        ]
        if resp.status != 200 or not stream:
            await self._relay_whole(path, resp, headers, rec, ticket, send)
        else:
            await self._relay_stream(path, resp, headers, drop_usage, rec, ticket, receive, send)

    async def _relay_whole(
        self,
        path: str,
        resp: UpstreamResponse,
        headers: list[tuple[bytes, bytes]],
        rec: RequestRecord,
        ticket: Ticket,
        send: Send,
    ) -> None:
        try:
            data = await resp.read()
        except TimeoutError:
            resp.close()
            await self._fail(send, path, rec, ticket, 504, "upstream timed out")
            return
        except CONNECTION_ERRORS as exc:
            resp.close()
            msg = self._engine_failed(self.engines[ticket.decision.decode], exc, "dropped")
            await self._fail(send, path, rec, ticket, 502, msg)
            return
        finally:
            resp.release()
        headers.append((b"content-length", str(len(data)).encode()))
        start = {"type": "http.response.start", "status": resp.status, "headers": headers}
        await send(start | {HOLD_HEADERS: True})
        await send({"type": "http.response.body", "body": data, "more_body": False})
        # The accounting after the answer is on its way: it does not delay the client.
        self.state.first_token(ticket)
        if resp.status == 200:
            with contextlib.suppress(msgspec.DecodeError, AttributeError):
                _take_usage(rec, _decode(data).get("usage"))
        else:
            rec.error = f"upstream HTTP {resp.status}: {data[:300].decode('utf-8', 'replace')}"
        self._done(path, rec, ticket, "ok" if resp.status == 200 else f"http_{resp.status}")

    async def _relay_stream(
        self,
        path: str,
        resp: UpstreamResponse,
        headers: list[tuple[bytes, bytes]],
        drop_usage: bool,
        rec: RequestRecord,
        ticket: Ticket,
        receive: Receive,
        send: Send,
    ) -> None:
        tracker = StreamTracker(drop_usage_event=drop_usage, messages_api=path == MESSAGES_PATH)
        # The head goes out with the first events when they are already here (one write);
        # otherwise at once, so a client sees the response begin while the engine works.
        start = {"type": "http.response.start", "status": 200, "headers": headers}
        held = resp.has_data()
        await send(start | {HOLD_HEADERS: True} if held else start)
        error: tuple[str, str, int] | None = None
        outcome = "ok"
        closed = False  # the client's response has ended

        def on_client_gone(fut: asyncio.Future[Message]) -> None:
            # Wake the relay now rather than at the engine's next chunk: a queued or stalled
            # request may send none for a long time, and the engine frees the slot only when
            # its connection closes.
            if not fut.cancelled() and not closed:
                resp.abandon()

        # A client that goes away shows up as a message on receive(); the upstream stream is
        # then closed, which makes vLLM abort the request instead of decoding for nobody. The
        # watch starts once the first bytes are out, when events are already in hand (a task's
        # start is work the first bytes need not wait for), or before the first wait.
        client_gone: asyncio.Future[Message] | None = None
        try:
            while True:
                if client_gone is None and not (held and resp.has_data()):
                    client_gone = asyncio.ensure_future(receive())
                    client_gone.add_done_callback(on_client_gone)
                chunk = await resp.next_chunk()
                if not chunk:
                    break
                out, first = tracker.feed(chunk)
                if first:  # stamped at arrival; counted in the router's state once sent on
                    rec.t_first_token = self.now()
                if tracker.done:
                    # [DONE] ends the stream: end the client's response with it, rather than
                    # on one more wake-up when the engine's end of body arrives.
                    closed = True
                    await send({"type": "http.response.body", "body": out, "more_body": False})
                elif out or held:  # (an empty body message writes a held head)
                    held = False
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                if first:
                    self.state.first_token(ticket, rec.t_first_token)
                if closed:
                    break
                if client_gone is not None and client_gone.done():
                    outcome = "client_gone"
                    break
        except UpstreamAbandoned:
            outcome = "client_gone"
        except TimeoutError:
            error = ("upstream timed out mid-stream", "timeout", 504)
        except CONNECTION_ERRORS as exc:
            msg = self._engine_failed(self.engines[ticket.decision.decode], exc, "dropped")
            error = (msg, "upstream_error", 502)
        finally:
            if client_gone is not None:
                client_gone.cancel()
            if closed:
                # Read the engine's end of body too, so its connection goes back to the pool.
                with contextlib.suppress(*CONNECTION_ERRORS, TimeoutError):
                    await resp.read()
            if error is not None or outcome == "client_gone" or not tracker.done:
                resp.close()  # do not return a half-read connection to the pool
            else:
                resp.release()
        if outcome == "client_gone":
            rec.error = "client disconnected"
        elif error is not None:
            rec.error = error[0]
            outcome = error[1]
            err = _sse_error(*error, messages_api=path == MESSAGES_PATH)
            await send({"type": "http.response.body", "body": err, "more_body": True})
        elif not tracker.done:
            rec.error = "upstream stream ended without [DONE]"
            outcome = "truncated"
        elif tracker.error is not None:
            rec.error = f"engine error: {tracker.error}"
            outcome = "engine_error"
        if not closed:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        _take_usage(rec, tracker.usage)
        if tracker.usage is None:
            rec.output_tokens = tracker.content_events
        self._done(path, rec, ticket, outcome)

    def _colocate_on_decode(self, ticket: Ticket, rec: RequestRecord, why: str) -> Ticket:
        """Replace a PD ticket whose prefill failed by a colocated one on its decode instance."""
        d = ticket.decision
        log.warning("request %s: PD fallback to colocated on %d: %s", rec.request_id, d.decode, why)
        release_first, ticket.release_first = ticket.release_first, False  # (on the new one)
        self.state.finish(ticket)
        session = ticket.request.session_id
        if session is not None:  # admit counts the turn again
            self.state.session_turns[session] -= 1
        colo = Decision(
            prefill=d.decode,
            decode=d.decode,
            route_class=pd.colocated_class(d.route_class),
            reason=f"{d.reason}+pd_fallback",
            policy=d.policy,
            predicted_cached_tokens=rec.predicted_decode_cached_tokens or 0,
            scores=d.scores,
        )
        _fill_decision(rec, colo)
        rec.pd_fallback = why
        rec.predicted_decode_cached_tokens = None
        self.metrics.decision(colo.route_class, colo.reason)
        colocated = self.state.admit(ticket.request, colo, self.now())
        colocated.release_first = release_first
        return colocated

    def _done(self, path: str, rec: RequestRecord, ticket: Ticket, outcome: str) -> None:
        if rec.t_prefill_done is not None:
            _pd_accounting(rec)
        rec.t_done = self.now()
        self.state.finish(ticket, rec.output_tokens, rec.t_done)
        self.metrics.request(path, outcome)
        self.records.add(rec)


def _with_release_first(body: dict[str, Any]) -> dict[str, Any]:
    """The request with vLLM's `vllm_xargs` asking the release-first plugin to free its KV to
    the head of the free queue (a copy: a retry elsewhere re-sends the client's body)."""
    xargs = body.get("vllm_xargs")
    kept = xargs if isinstance(xargs, dict) else {}
    return {**body, "vllm_xargs": {**kept, RELEASE_FIRST_XARG: 1}}


def _fill_decision(rec: RequestRecord, d: Decision) -> None:
    rec.route_class = d.route_class
    rec.reason = d.reason
    rec.policy = d.policy
    rec.prefill_instance = d.prefill
    rec.decode_instance = d.decode
    rec.predicted_cached_tokens = d.predicted_cached_tokens
    rec.scores = {str(k): v for k, v in d.scores.items()}


def _pd_accounting(rec: RequestRecord) -> None:
    """A finished PD request. D pulls every prompt token it does not hold (NIXL also moves the
    trailing partial block), so the KV moved is the prompt less D's own prefix hit as the view
    predicted it. D's usage does not count pulled tokens as cached (measured on vLLM 0.32:
    0 while its `external_kv_transfer` counter grew by the prompt), so it is kept apart, and the
    record's `cached_tokens` becomes P's hit: what the policy's prediction was about."""
    if rec.t_first_token is not None and rec.t_prefill_done is not None:
        rec.kv_transfer_s = rec.t_first_token - rec.t_prefill_done
    rec.decode_cached_tokens = rec.cached_tokens
    if rec.prefill_cached_tokens is not None:
        rec.cached_tokens = rec.prefill_cached_tokens
    rec.kv_transfer_tokens = max(rec.input_tokens - (rec.predicted_decode_cached_tokens or 0), 0)


def _take_usage(rec: RequestRecord, usage: Any) -> None:
    """Output and cached tokens from an OpenAI usage object (cached needs vLLM's
    `--enable-prompt-tokens-details`; without it the field is absent and stays 0), or from a
    Messages API one (`output_tokens`, `cache_read_input_tokens`)."""
    if not isinstance(usage, dict):
        return
    out = usage.get("completion_tokens", usage.get("output_tokens"))
    if isinstance(out, int):
        rec.output_tokens = out
    hit = usage.get("cache_read_input_tokens")  # (the Messages API's)
    if isinstance(hit, int):
        rec.cached_tokens = hit
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        rec.cached_tokens = details["cached_tokens"]


def create_app(settings: ProxySettings) -> ProxyApp:
    """The proxy as an ASGI app (serve it with uvicorn, or `serve.run_proxy`)."""
    return ProxyApp(settings)
