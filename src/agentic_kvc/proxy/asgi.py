"""ASGI plumbing every app served here shares (the proxy, the EPD proxy, the fake engine, test
apps): the message types and the lifespan handshake.

Its own module, below `app.py` and `server.py`: `server.py` serves `app.py`'s app, so the app
could not import the handshake from there without an import cycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def run_lifespan(
    receive: Receive,
    send: Send,
    startup: Callable[[], Awaitable[None]] | None = None,
    shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """An app's side of a `lifespan` scope: startup and shutdown are each answered once their
    hook, if any, has run. A startup hook that raises answers `lifespan.startup.failed` with
    its message, and uvicorn then does not serve."""
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            if startup is not None:
                try:
                    await startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            if shutdown is not None:
                await shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
