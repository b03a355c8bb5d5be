"""What the workbench's vLLM plugins (serve/vllm_release_first.py,
serve/vllm_refresh_on_arrival.py) need from vLLM's internals, found or refused in one place: each
patches a private method of vLLM 0.32's v1 scheduler, so on a vLLM without it the plugin logs why
and patches nothing."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


def v1_scheduler(env: str, needed: Sequence[str], manager_needs: Sequence[str] = ()) -> Any:
    """vLLM's v1 `Scheduler` class when it has the methods `needed` (and its `KVCacheManager`
    those in `manager_needs`); else None, with a warning naming the plugin's `env` variable."""
    try:
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.sched.scheduler import Scheduler
    except ImportError as exc:
        log.warning("%s: vLLM's v1 scheduler not importable (%s); not patched", env, exc)
        return None
    missing = [f"Scheduler.{n}" for n in needed if not hasattr(Scheduler, n)]
    missing += [f"KVCacheManager.{n}" for n in manager_needs if not hasattr(KVCacheManager, n)]
    if missing:
        log.warning("%s: this vLLM lacks %s; not patched", env, ", ".join(missing))
        return None
    return Scheduler


def announce(env: str, patched: str) -> None:
    """One line in the engine's log saying the plugin is active (a real run's logs then show
    which engines ran it). Printed, not logged: the plugin's logger has no handler in vLLM's
    processes, whose logging configures only vLLM's own loggers."""
    print(f"agentic_kvc: {env}=1: {patched} patched", file=sys.stderr, flush=True)
