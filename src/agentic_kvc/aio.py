"""Small asyncio helpers shared by the long-running loops (the proxy's engine clients and
record writer, the KV-event subscriber, the run sampler)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel `tasks`, then wait for each to end, so none of them runs when this returns.

    All are cancelled before any is awaited (they wind down together); a task's
    CancelledError is swallowed, any other exception it ended with is raised."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
