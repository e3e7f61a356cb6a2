"""An in-process ASGI websocket client: drives an ASGI app's websocket scope
the way an ASGI server does (``websocket.connect`` first, then the client's
messages; ``websocket.disconnect`` when it leaves) and records what the app
sends back."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import trio


class AsgiSocketClient:
    def __init__(self, to_app: trio.MemorySendChannel, from_app: trio.MemoryReceiveChannel):
        self._to_app = to_app
        self._from_app = from_app

    async def event(self) -> dict[str, Any]:
        """The app's next ASGI event (``websocket.accept``, ``.send``, ``.close``…)."""
        with trio.fail_after(10):
            return await self._from_app.receive()

    async def send(self, frame: dict[str, Any]) -> None:
        await self._to_app.send({"type": "websocket.receive", "text": json.dumps(frame)})

    async def frame(self) -> dict[str, Any]:
        """The next text message the app sent, parsed (accept events skipped)."""
        while True:
            event = await self.event()
            if event["type"] == "websocket.send":
                return json.loads(event["text"])
            assert event["type"] == "websocket.accept", event


@contextlib.asynccontextmanager
async def asgi_socket(app: Any, path: str = "/ws", headers: list[tuple[bytes, bytes]] | None = None,
                      client: tuple[str, int] = ("127.0.0.1", 40000), http_version: str = "1.1",
                      extensions: dict[str, Any] | None = None) -> AsyncIterator[AsgiSocketClient]:
    """Open a websocket scope on ``app``; on exit the client disconnects and the app is awaited."""
    to_app, app_receive = trio.open_memory_channel[dict](64)
    app_send, from_app = trio.open_memory_channel[dict](64)
    scope = {"type": "websocket", "asgi": {"version": "3.0"}, "scheme": "ws", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": headers or [(b"host", b"127.0.0.1")],
             "client": client, "server": ("127.0.0.1", 8080), "subprotocols": [], "http_version": http_version,
             "extensions": extensions or {}}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, scope, app_receive.receive, app_send.send)
        await to_app.send({"type": "websocket.connect"})
        yield AsgiSocketClient(to_app, from_app)
        await to_app.send({"type": "websocket.disconnect", "code": 1000})
