"""A NIXL connector that logs each request's engine-side lifecycle: vLLM loads it by module path.

Start an engine with `--kv-transfer-config` naming `"kv_connector": "NixlConnector"` and
`"kv_connector_module_path": "agentic_kvc.lifecycle.logging_nixl_connector"`: vLLM's factory
then takes the class `NixlConnector` from this module, a subclass of the project's CPU NIXL
connector (`serve.pinned_nixl_connector`: vLLM's own, its worker threads re-pinned to the
instance's cores) that only adds logging. Because the name is unchanged, vLLM's config checks
that look for "NixlConnector" still apply. No vLLM source is patched; the worker's transfer
polling is wrapped on the instance.

Each hook appends one JSON line to the file named by `AKVC_LIFECYCLE_LOG` (unset: no logging):
`{"ev", "t_ns", "req", "pid", "side", "engine", ...}` with `t_ns = time.monotonic_ns()`, the
system-wide CLOCK_MONOTONIC, so the scheduler process, the worker process and the client on the
same machine share one clock. Events (see `lifecycle.protocol` for how they become t0..t10):

- scheduler side: `seen` (first connector lookup: local hit and external tokens),
  `alloc` (blocks allocated), `scheduled` (first in a scheduler output: P's prefill starts,
  D's promotion), `recv_requested` (D's pull handed to the worker), `recv_done` (D's
  scheduler learns the pull finished), `send_done` (P learns D read its blocks), `finished`
  (P: prefill and its one token done; prompt tokens, blocks kept);
- worker side: `layout` (layers, bytes per block), `load_start` (the pull reached the
  worker: local / remote blocks), `read_posted` (NIXL read handles exist, with the start of
  the call that posted them), `read_done` (all reads of the request complete at a poll:
  bytes, descriptors, NIXL telemetry).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from agentic_kvc.serve.pinned_nixl_connector import NixlConnector as _CpuNixlConnector

LOG_ENV = "AKVC_LIFECYCLE_LOG"
_lock = threading.Lock()


def _emit(ev: str, req: str | None, side: str, engine: str | None, **extra: Any) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    rec = {"ev": ev, "t_ns": time.monotonic_ns(), "req": req, "pid": os.getpid(), "side": side}
    rec["engine"] = engine
    rec.update(extra)
    line = json.dumps(rec, default=str) + "\n"
    # One write per line with O_APPEND: lines from the scheduler and the worker never interleave.
    with _lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _safe(fn: Any) -> Any:
    """Logging must never break serving: a failing probe is dropped."""

    def run(*args: Any, **kw: Any) -> None:
        try:
            fn(*args, **kw)
        except Exception as exc:  # any probe failure is only logged
            _emit("probe_error", None, "?", None, probe=fn.__name__, error=repr(exc))

    return run


def _params_kind(params: Any) -> str | None:
    if not isinstance(params, dict):
        return None
    if params.get("do_remote_prefill"):
        return "pull"  # D: pulls a remote prefill
    if params.get("do_remote_decode"):
        return "produce"  # P: keeps its blocks for a remote decode
    return None


class NixlConnector(_CpuNixlConnector):
    """The project's NIXL (pull) connector plus per-request lifecycle events."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._akvc_engine = str(getattr(vllm_config.kv_transfer_config, "engine_id", None))
        self._akvc_seen: set[str] = set()
        self._akvc_scheduled: set[str] = set()
        self._akvc_posted: set[str] = set()
        self._akvc_call_ns = 0
        if self.connector_worker is not None:
            # The base class put the worker's threads back on the instance's own cores.
            _emit("repinned", None, "worker", None, cores=self.repinned_cores)
            self._wrap_worker(self.connector_worker)

    # ---- scheduler side -------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
        out = super().get_num_new_matched_tokens(request, num_computed_tokens)
        self._log_seen(request, num_computed_tokens, out)
        return out

    @_safe
    def _log_seen(self, request: Any, num_computed_tokens: int, out: Any) -> None:
        if request.request_id in self._akvc_seen:
            return
        self._akvc_seen.add(request.request_id)
        ext = out[0] if isinstance(out, tuple) else None
        _emit(
            "seen",
            request.request_id,
            "scheduler",
            self._akvc_engine,
            local_hit_tokens=num_computed_tokens,
            external_tokens=ext,
            prompt_tokens=getattr(request, "num_prompt_tokens", None),
            kind=_params_kind(getattr(request, "kv_transfer_params", None)),
        )

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> Any:
        out = super().update_state_after_alloc(request, blocks, num_external_tokens)
        self._log_alloc(request, blocks, num_external_tokens)
        return out

    @_safe
    def _log_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        ids = blocks.get_block_ids() if hasattr(blocks, "get_block_ids") else None
        n_blocks = len(ids[0]) if ids else None
        _emit(
            "alloc",
            request.request_id,
            "scheduler",
            self._akvc_engine,
            external_tokens=num_external_tokens,
            blocks=n_blocks,
        )

    def build_connector_meta(self, scheduler_output: Any) -> Any:
        meta = super().build_connector_meta(scheduler_output)
        self._log_meta(scheduler_output, meta)
        return meta

    @_safe
    def _log_meta(self, scheduler_output: Any, meta: Any) -> None:
        for new in getattr(scheduler_output, "scheduled_new_reqs", []) or []:
            rid = new.req_id
            if rid not in self._akvc_scheduled:
                self._akvc_scheduled.add(rid)
                n = getattr(scheduler_output, "num_scheduled_tokens", {}).get(rid)
                _emit("scheduled", rid, "scheduler", self._akvc_engine, tokens=n)
        for rid in getattr(meta, "reqs_to_recv", {}) or {}:
            _emit("recv_requested", rid, "scheduler", self._akvc_engine)

    def update_connector_output(self, connector_output: Any) -> None:
        super().update_connector_output(connector_output)
        self._log_output(connector_output)

    @_safe
    def _log_output(self, connector_output: Any) -> None:
        for rid in connector_output.finished_recving or ():
            _emit("recv_done", rid, "scheduler", self._akvc_engine)
        for rid in connector_output.finished_sending or ():
            _emit("send_done", rid, "scheduler", self._akvc_engine)

    def request_finished(self, request: Any, block_ids: list[int]) -> Any:
        out = super().request_finished(request, block_ids)
        self._log_finished(request, len(block_ids), out)
        return out

    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]) -> Any:
        out = super().request_finished_all_groups(request, block_ids)
        self._log_finished(request, len(block_ids[0]) if block_ids else 0, out)
        return out

    @_safe
    def _log_finished(self, request: Any, n_blocks: int, out: Any) -> None:
        delay_free = out[0] if isinstance(out, tuple) else None
        self._akvc_seen.discard(request.request_id)
        self._akvc_scheduled.discard(request.request_id)
        _emit(
            "finished",
            request.request_id,
            "scheduler",
            self._akvc_engine,
            prompt_tokens=getattr(request, "num_prompt_tokens", None),
            blocks=n_blocks,
            delay_free=delay_free,
            kind=_params_kind(getattr(request, "kv_transfer_params", None)),
        )

    # ---- worker side ----------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        super().register_kv_caches(kv_caches)
        self._log_layout(kv_caches)

    @_safe
    def _log_layout(self, kv_caches: dict[str, Any]) -> None:
        total = sum(t.numel() * t.element_size() for t in kv_caches.values())
        n_blocks = getattr(self._kv_cache_config, "num_blocks", None)
        _emit(
            "layout",
            None,
            "worker",
            self._akvc_engine,
            layers=len(kv_caches),
            kv_bytes=total,
            num_blocks=n_blocks,
            bytes_per_block=(total // n_blocks) if n_blocks else None,
            shape=list(next(iter(kv_caches.values())).shape) if kv_caches else None,
        )

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._connector_metadata
        self._akvc_call_ns = time.monotonic_ns()
        self._log_load_start(meta)
        super().start_load_kv(forward_context, **kwargs)
        self._log_posted()

    @_safe
    def _log_load_start(self, meta: Any) -> None:
        for rid, m in (getattr(meta, "reqs_to_recv", {}) or {}).items():
            local = m.local_block_ids[0] if m.local_block_ids else []
            remote = m.remote.block_ids[0] if m.remote and m.remote.block_ids else []
            _emit(
                "load_start",
                rid,
                "worker",
                self._akvc_engine,
                local_blocks=len(local),
                remote_blocks=len(remote),
                local_computed_blocks=list(getattr(m, "local_num_computed_blocks", ()) or ()),
                remote_engine=m.remote.engine_id if m.remote else None,
            )

    @_safe
    def _log_posted(self) -> None:
        worker = self.connector_worker
        for rid, handles in list(getattr(worker, "_recving_transfers", {}).items()):
            if handles and rid not in self._akvc_posted:
                self._akvc_posted.add(rid)
                _emit(
                    "read_posted",
                    rid,
                    "worker",
                    self._akvc_engine,
                    handles=len(handles),
                    call_t_ns=self._akvc_call_ns,  # the start_load_kv call that posted them
                )

    def _wrap_worker(self, worker: Any) -> None:
        """Per-request NIXL telemetry: the worker polls each request's read handles in turn."""
        original_pop = worker._pop_done_transfers
        connector = self

        def pop_done(transfers: dict[str, list[int]]) -> Any:
            before = {rid: list(h) for rid, h in transfers.items()}
            tele: dict[int, Any] = {}
            agent = worker.nixl_wrapper
            original_tele = agent.get_xfer_telemetry

            def get_tele(handle: Any) -> Any:
                res = original_tele(handle)
                tele[id(handle) if not isinstance(handle, int) else handle] = res
                return res

            agent.get_xfer_telemetry = get_tele
            try:
                done, failed = original_pop(transfers)
            finally:
                agent.get_xfer_telemetry = original_tele
            connector._log_read_done(before, tele, done, failed)
            return done, failed

        worker._pop_done_transfers = pop_done

    @_safe
    def _log_read_done(
        self, before: dict[str, list[Any]], tele: dict[int, Any], done: set[str], failed: set[str]
    ) -> None:
        for rid in done:
            handles = before.get(rid, [])
            res = [tele.get(h if isinstance(h, int) else id(h)) for h in handles]
            res = [r for r in res if r is not None]
            self._akvc_posted.discard(rid)
            _emit(
                "read_done",
                rid,
                "worker",
                self._akvc_engine,
                failed=rid in failed,
                ops=len(handles),
                bytes=sum(int(r.totalBytes) for r in res) if res else None,
                descriptors=sum(int(r.descCount) for r in res) if res else None,
                nixl_start_us=min(int(r.startTime) for r in res) if res else None,
                nixl_post_us=sum(float(r.postDuration) for r in res) if res else None,
                nixl_xfer_us=max(float(r.xferDuration) for r in res) if res else None,
            )
