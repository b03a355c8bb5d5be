"""A trace of a real vLLM 0.32 engine's block traffic, step by step, for explaining what its lazy
host tier stores (docs/kv_tiers_real.md section 8).

Opt-in and for benchmarks only: `trace_env(folder)` returns the environment that makes every
Python process of an engine started with it import this module at start-up (a `sitecustomize`
in `folder`, first on PYTHONPATH) and wrap, in the engine core, the calls that move blocks:
- `Scheduler.add_request` (id, prompt length), `Scheduler.schedule` (its start and end: waiting
  and running counts, free blocks) and `Scheduler.update_from_output` (a step's end);
- `KVCacheManager.allocate_slots` (the request, its status, whether it was given blocks, and
  the blocks it holds afterwards) and `KVCacheManager.free` (the blocks released, in the
  engine's free order);
- `SimpleCPUOffloadScheduler._prepare_lazy_store_specs` (the GPU blocks the lazy walk stores);
and where a request spends its way in: the API server's `OpenAIServingCompletion.
create_completion` (the HTTP request handled) and `AsyncLLM.add_request` (handed to the engine),
the engine core's input thread (`EngineCore.preprocess_add_request`).
Each event is one JSON line in `folder/trace-<pid>.jsonl`, in the order the engine made them
(the engine core is one thread). The wrapped methods are vLLM internals: on another release
`install` names the one it could not find and wraps the others.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "AKVC_STEP_TRACE"  # the folder the trace files go to

SITECUSTOMIZE = f"""import os
if os.environ.get({ENV!r}):
    import vllm_step_trace
    vllm_step_trace.install()
"""


def trace_env(folder: Path) -> dict[str, str]:
    """The environment (to add to an engine's) that traces it into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (str(folder), here, os.environ.get("PYTHONPATH")) if p)
    return {ENV: str(folder), "PYTHONPATH": path}


def read_trace(folder: Path) -> list[dict[str, Any]]:
    """Every event of the processes that wrote any (the engine core's), in their order."""
    events: list[dict[str, Any]] = []
    for f in sorted(folder.glob("trace-*.jsonl")):
        with f.open() as fh:
            events += [json.loads(line) for line in fh if line.strip()]
    return events


class _Sink:
    def __init__(self, folder: str) -> None:
        self.path = Path(folder) / f"trace-{os.getpid()}.jsonl"
        self.fh: Any = None

    def __call__(self, **event: Any) -> None:
        if self.fh is None:  # opened at the first event: only the engine core writes
            self.fh = self.path.open("a", buffering=1)
        event["t"] = time.time()
        self.fh.write(json.dumps(event) + "\n")


def _wrap(cls: Any, name: str, around: Callable[..., Any]) -> bool:
    """Replace `cls.name` by `around(original, self, *args, **kwargs)`; a coroutine method stays
    one (its wrapper awaits what `around` returns). False, said on stderr, where it is missing."""
    original = getattr(cls, name, None)
    if original is None:
        print(f"vllm_step_trace: {cls.__name__}.{name} not found, not traced", file=sys.stderr)
        return False
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await around(original, self, *args, **kwargs)

    else:

        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            return around(original, self, *args, **kwargs)

    setattr(cls, name, wrapper)
    return True


def _ids(blocks: Any) -> list[int]:
    """The first KV cache group's block ids of a KVCacheBlocks."""
    return list(blocks.get_block_ids()[0]) if blocks is not None else []


def install() -> None:
    """Wrap the engine's block-moving calls (module docstring); idempotent."""
    if getattr(install, "done", False):
        return
    install.done = True  # type: ignore[attr-defined]
    folder = os.environ[ENV]
    emit = _Sink(folder)
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler

    def http_in(orig: Callable[..., Any], self: Any, request: Any, *a: Any, **k: Any) -> Any:
        prompt = getattr(request, "prompt", None)
        emit(ev="http", prompt=len(prompt) if isinstance(prompt, list) else None)
        return orig(self, request, *a, **k)

    def api_add(orig: Callable[..., Any], self: Any, request_id: str, *a: Any, **k: Any) -> Any:
        emit(ev="api_add", req=request_id)
        return orig(self, request_id, *a, **k)

    def core_recv(orig: Callable[..., Any], self: Any, request: Any, *a: Any, **k: Any) -> Any:
        emit(ev="core_recv", req=request.request_id)
        return orig(self, request, *a, **k)

    def add_request(orig: Callable[..., Any], self: Any, request: Any, *a: Any, **k: Any) -> Any:
        emit(ev="add", req=request.request_id, prompt=request.num_prompt_tokens)
        return orig(self, request, *a, **k)

    def schedule(orig: Callable[..., Any], self: Any, *a: Any, **k: Any) -> Any:
        pool = self.kv_cache_manager.block_pool
        emit(
            ev="schedule",
            waiting=len(self.waiting),
            running=len(self.running),
            free=pool.get_num_free_blocks(),
        )
        out = orig(self, *a, **k)
        emit(ev="schedule_end", new=[r.req_id for r in out.scheduled_new_reqs])
        return out

    def update(orig: Callable[..., Any], self: Any, *a: Any, **k: Any) -> Any:
        out = orig(self, *a, **k)
        emit(ev="update_end", free=self.kv_cache_manager.block_pool.get_num_free_blocks())
        return out

    def allocate(orig: Callable[..., Any], self: Any, request: Any, *a: Any, **k: Any) -> Any:
        free = self.block_pool.get_num_free_blocks()
        out = orig(self, request, *a, **k)
        emit(
            ev="alloc",
            req=request.request_id,
            status=str(request.status),
            ok=out is not None,
            free_before=free,
            blocks=_ids(self.get_blocks(request.request_id)) if out is not None else [],
        )
        return out

    def free(orig: Callable[..., Any], self: Any, request: Any, *a: Any, **k: Any) -> Any:
        held = _ids(self.get_blocks(request.request_id))
        out = orig(self, request, *a, **k)
        emit(ev="free", req=request.request_id, blocks=held)
        return out

    def lazy_store(orig: Callable[..., Any], self: Any, *a: Any, **k: Any) -> Any:
        out = orig(self, *a, **k)
        emit(ev="store", gpu=list(out[0]))
        return out

    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # the API server then parses HTTP with h11: not traced
        pass
    else:

        def read(orig: Callable[..., Any], self: Any, *a: Any, **k: Any) -> Any:
            emit(ev="http_read")
            return orig(self, *a, **k)

        def got(orig: Callable[..., Any], self: Any, data: bytes, *a: Any, **k: Any) -> Any:
            emit(ev="http_bytes", n=len(data))
            return orig(self, data, *a, **k)

        _wrap(HttpToolsProtocol, "on_message_complete", read)
        _wrap(HttpToolsProtocol, "data_received", got)
    _wrap(OpenAIServingCompletion, "create_completion", http_in)
    _wrap(AsyncLLM, "add_request", api_add)
    _wrap(EngineCore, "preprocess_add_request", core_recv)
    _wrap(Scheduler, "add_request", add_request)
    _wrap(Scheduler, "schedule", schedule)
    _wrap(Scheduler, "update_from_output", update)
    _wrap(KVCacheManager, "allocate_slots", allocate)
    _wrap(KVCacheManager, "free", free)
    _wrap(SimpleCPUOffloadScheduler, "_prepare_lazy_store_specs", lazy_store)
