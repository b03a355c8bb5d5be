"""`server.run_lifespan`: the ASGI lifespan handshake every app served here shares."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentic_kvc.proxy.asgi import run_lifespan
from agentic_kvc.proxy.server import ServerThread


def _handshake(startup: Any = None, shutdown: Any = None) -> list[str]:
    """What run_lifespan sends for a startup then a shutdown, in order, with the hooks' calls."""
    events: list[str] = []
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(msg: Any) -> None:
        events.append(msg["type"] + (f" {msg['message']}" if "message" in msg else ""))

    def hook(name: str, fn: Any) -> Any:
        async def run() -> None:
            events.append(name)
            await fn()

        return run if fn is not None else None

    asyncio.run(run_lifespan(receive, send, hook("startup", startup), hook("shutdown", shutdown)))
    return events


async def _ok() -> None:
    return None


async def _fail() -> None:
    raise RuntimeError("no engine answers")


def test_each_step_completes_after_its_hook() -> None:
    assert _handshake() == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert _handshake(_ok, _ok) == [
        "startup",
        "lifespan.startup.complete",
        "shutdown",
        "lifespan.shutdown.complete",
    ]


def test_a_failing_startup_is_reported_and_ends_the_handshake() -> None:
    assert _handshake(_fail, _ok) == ["startup", "lifespan.startup.failed no engine answers"]


def test_a_server_whose_startup_fails_does_not_serve() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await run_lifespan(receive, send, _fail)

    with pytest.raises(RuntimeError, match="did not start"):
        ServerThread(app).start(timeout_s=10)
