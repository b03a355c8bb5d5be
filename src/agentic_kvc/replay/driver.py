"""Replay a workload against an OpenAI-compatible target: closed-loop sessions or open loop.

Closed loop (agentic sessions): a session starts at its first turn's arrival; each later turn
is sent `think_s` (tool/think wait) after the previous turn finished, so a slow server delays
the whole session as it would a real agent. Open loop: every request is sent at its own
arrival time, whether or not earlier turns finished.

Agentic DAGs (`Request.depends_on`): a subagent session starts `think_s` after the turn that
spawned it finished, concurrently with its siblings; a join turn is sent `think_s` after its
previous turn and every subagent it waits for finished (open loop: at its arrival or when its
dependencies are done, whichever is later). Subagents run inside their parent's session slot
and send `x-parent-session-id`. Every request says whether it is its session's last turn
(`x-session-last-turn`: the finish signal the simulator gives policies, proxy/session.py).

`max_inflight_sessions` caps the sessions holding a slot at once (64 / 128 active agents): a
session takes a slot when it starts and gives it back after its last turn; sessions whose start
time has passed queue for a slot in start order. `time_scale` multiplies every workload time
(arrivals and think waits): 0.5 replays twice as fast, 0 sends without waiting.

All record times are seconds on the run clock: time.monotonic() minus `clock_origin`
(default: the replay's start), the same clock the proxy is given, so their records merge.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from tqdm import tqdm

from agentic_kvc.metrics.records import RequestRecord
from agentic_kvc.replay.client import (
    Outcome,
    chat_body,
    completion_body,
    new_http_session,
    send_completion,
)
from agentic_kvc.workload.model import Request, Session, Workload, live_dependencies
from agentic_kvc.workload.tokens import block_messages

TokenFn = Callable[[Request], Sequence[int]]
RecordHook = Callable[[RequestRecord], None]


@dataclass(slots=True)
class ReplaySettings:
    target: str  # base URL of the proxy or engine
    model: str
    mode: Literal["closed", "open"] = "closed"
    time_scale: float = 1.0
    max_inflight_sessions: int | None = None
    timeout_s: float = 600.0
    stream: bool = True
    # "completions": token ids to /v1/completions (exact lengths); "chat": each request as a
    # conversation (`workload.tokens.block_messages`) to /v1/chat/completions, which the proxy
    # renders and tokenizes as it does an agent's.
    api: Literal["completions", "chat"] = "completions"
    endpoint: str = ""
    progress: bool = True

    def __post_init__(self) -> None:
        self.target = self.target.rstrip("/")
        if not self.target.startswith(("http://", "https://")):
            raise ValueError(f"target {self.target!r}: expected an http:// or https:// URL")
        if self.mode not in ("closed", "open"):
            raise ValueError(f"mode {self.mode!r}: expected closed or open")
        if self.time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {self.time_scale}")
        if self.max_inflight_sessions is not None and self.max_inflight_sessions < 1:
            raise ValueError("max_inflight_sessions must be >= 1")
        if self.timeout_s <= 0:
            raise ValueError("timeout must be positive")
        if self.api not in ("completions", "chat"):
            raise ValueError(f"api {self.api!r}: expected completions or chat")
        if not self.endpoint:
            self.endpoint = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"


def record_from_outcome(
    req: Request, n_prompt: int, arrival_s: float, out: Outcome, origin: float
) -> RequestRecord:
    """The client's half of a RequestRecord (the proxy's breakdown is merged later)."""
    t = out.timing
    rec = RequestRecord(
        request_id=req.request_id,
        session_id=req.session_id,
        turn=req.turn,
        arrival_s=arrival_s,
        input_tokens=t.prompt_tokens if t.prompt_tokens is not None else n_prompt,
        output_tokens=t.output_tokens,
        cached_tokens=t.cached_tokens or 0,
        t_proxy_recv=t.t_send - origin,
        t_first_token=None if t.t_first is None else t.t_first - origin,
        # As vllm bench: a request ends at its last token event, not at [DONE].
        t_done=None if t.t_last is None else t.t_last - origin,
        itl_s=list(t.itl),
        error=out.error,
    )
    rc = out.receipt
    rec.policy = str(rc.get("policy") or "")
    rec.route_class = str(rc.get("route_class") or "")
    rec.reason = str(rc.get("reason") or "")
    rec.prefill_instance = rc.get("prefill_instance")
    rec.decode_instance = rc.get("decode_instance")
    rec.predicted_cached_tokens = rc.get("predicted_cached_tokens")
    if isinstance(rc.get("scores"), dict):
        rec.scores = rc["scores"]
    if out.error:
        rec.t_done = None  # a failed request has no completion time; summaries skip it
    return rec.finalize()


class Replayer:
    def __init__(
        self,
        settings: ReplaySettings,
        token_ids: TokenFn,
        clock_origin: float | None = None,
        on_record: RecordHook | None = None,
    ) -> None:
        self.s = settings
        self.token_ids = token_ids
        self.clock_origin = clock_origin
        self.on_record = on_record
        self.records: list[RequestRecord] = []

    def now(self) -> float:
        return time.monotonic() - self._origin

    async def run(self, workload: Workload) -> list[RequestRecord]:
        self._origin = self.clock_origin if self.clock_origin is not None else time.monotonic()
        self._start = time.monotonic()  # workload time 0 is when the replay starts
        cap = self.s.max_inflight_sessions or max(len(workload.sessions), 1)
        self._slots = asyncio.Semaphore(cap)
        self._bar = tqdm(
            total=len(workload),
            disable=not self.s.progress,
            unit="req",
            desc="replay",
            mininterval=0.5,
        )
        self._errors = 0
        # Agentic DAGs: a request waits for the requests it depends on (besides its session's
        # previous turn); each finished request sets its event, failed ones included.
        self._deps = live_dependencies(workload)
        needed = {d for deps in self._deps.values() for d in deps}
        self._done = {rid: asyncio.Event() for rid in needed}
        self._parent_of = {s.session_id: s.parent_session_id for s in workload.sessions}
        # The finish signal (proxy/session.py), as the simulator gives it to every policy.
        self._last_ids = {s.requests[-1].request_id for s in workload.sessions if s.requests}
        # Start order decides who queues first for a slot.
        sessions = sorted(workload.sessions, key=lambda s: (s.start_s, s.session_id))
        try:
            async with new_http_session(self.s.timeout_s) as http:
                self._http = http
                run_one = self._closed_session if self.s.mode == "closed" else self._open_session
                await asyncio.gather(*(run_one(s) for s in sessions if s.requests))
        finally:
            self._bar.close()
        self.records.sort(key=lambda r: (r.arrival_s, r.session_id, r.turn))
        return self.records

    def _scaled(self, workload_s: float) -> float:
        return workload_s * self.s.time_scale

    async def _sleep_until(self, workload_s: float) -> None:
        delay = self._start + self._scaled(workload_s) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _wait_deps(self, req: Request) -> bool:
        """Wait until the requests `req` depends on are done; True if it had any."""
        deps = self._deps.get(req.request_id)
        if not deps:
            return False
        for d in deps:
            await self._done[d].wait()
        return True

    async def _think(self, req: Request) -> None:
        if req.think_s > 0 and self.s.time_scale > 0:
            await asyncio.sleep(self._scaled(req.think_s))

    async def _closed_session(self, session: Session) -> None:
        first = session.requests[0]
        if first.request_id in self._deps:
            # A subagent starts when the turn that spawns it is done, then its own wait.
            await self._wait_deps(first)
            await self._think(first)
        else:
            await self._sleep_until(session.start_s)
        # A subagent runs inside its parent's slot: a capped parent waiting for its subagents
        # would otherwise deadlock.
        slot = self._slots if session.parent_session_id is None else contextlib.nullcontext()
        async with slot:
            for k, req in enumerate(session.requests):
                if k > 0:
                    await self._wait_deps(req)
                    await self._think(req)
                await self._send(req, self.now())

    async def _open_session(self, session: Session) -> None:
        await self._sleep_until(session.start_s)
        async with self._slots:

            async def at_arrival(req: Request) -> None:
                await self._sleep_until(req.arrival_s)
                scheduled = self._start + self._scaled(req.arrival_s) - self._origin
                if await self._wait_deps(req):
                    scheduled = max(scheduled, self.now())
                await self._send(req, scheduled)

            await asyncio.gather(*(at_arrival(r) for r in session.requests))

    def target_for(self, req: Request) -> str:
        """Base URL `req` is sent to; a subclass may spread requests over several proxies
        (instruments/routers_real.py)."""
        return self.s.target

    async def _send(self, req: Request, arrival_s: float) -> None:
        if self.s.api == "chat":
            n_prompt = req.input_tokens  # (the engine's count comes back in the usage)
            messages = block_messages(req)
            body = chat_body(
                self.s.model, messages, req.output_tokens, req.session_id, stream=self.s.stream
            )
        else:
            ids = self.token_ids(req)
            n_prompt = len(ids)
            body = completion_body(
                self.s.model, ids, req.output_tokens, req.session_id, stream=self.s.stream
            )
        headers = {
            "x-session-id": req.session_id,
            "x-request-id": req.request_id,
            "x-session-last-turn": "true" if req.request_id in self._last_ids else "false",
        }
        parent = self._parent_of.get(req.session_id)
        if parent is not None:
            headers["x-parent-session-id"] = parent
        try:
            out = await send_completion(
                self._http, self.target_for(req) + self.s.endpoint, body, headers, self.s.timeout_s
            )
        finally:
            done = self._done.get(req.request_id)
            if done is not None:
                done.set()
        rec = record_from_outcome(req, n_prompt, arrival_s, out, self._origin)
        self.records.append(rec)
        if rec.error:
            self._errors += 1
            self._bar.set_postfix(errors=self._errors, refresh=False)
        self._bar.update(1)
        if self.on_record is not None:
            self.on_record(rec)


async def replay_async(
    workload: Workload,
    settings: ReplaySettings,
    token_ids: TokenFn,
    clock_origin: float | None = None,
    on_record: RecordHook | None = None,
) -> list[RequestRecord]:
    return await Replayer(settings, token_ids, clock_origin, on_record).run(workload)


def replay(
    workload: Workload,
    settings: ReplaySettings,
    token_ids: TokenFn,
    clock_origin: float | None = None,
) -> list[RequestRecord]:
    """Blocking wrapper for scripts and the CLI."""
    return asyncio.run(replay_async(workload, settings, token_ids, clock_origin))
