"""cancel_and_wait: the shutdown of the long-running loops (proxy, KV events, sampler)."""

from __future__ import annotations

import asyncio

import pytest

from agentic_kvc.aio import cancel_and_wait


def test_every_task_has_ended_cancelled_when_it_returns() -> None:
    ended: list[str] = []

    async def loop(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(name)

    async def main() -> list[asyncio.Task[None]]:
        tasks = [asyncio.create_task(loop(n)) for n in ("a", "b")]
        await asyncio.sleep(0)  # both running, blocked in their sleep
        await cancel_and_wait(tasks)
        return tasks

    tasks = asyncio.run(main())
    assert sorted(ended) == ["a", "b"]
    assert all(t.done() and t.cancelled() for t in tasks)


def test_a_task_that_failed_raises_its_error_and_a_finished_one_is_fine() -> None:
    async def fail() -> None:
        raise RuntimeError("boom")

    async def main() -> None:
        done = asyncio.create_task(asyncio.sleep(0))
        failed = asyncio.create_task(fail())
        await asyncio.sleep(0.01)  # both have ended
        await cancel_and_wait([done])
        with pytest.raises(RuntimeError, match="boom"):
            await cancel_and_wait([failed])

    asyncio.run(main())
