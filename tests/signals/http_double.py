"""A tiny HTTP/1.1 server on 127.0.0.1 port 0 for API doubles (trio + h11).

``serve(nursery, handler)`` starts it and returns the base URL; ``handler``
is ``async (method, path, query: dict[str, str]) -> (status, content_type,
body bytes)``.  One request per connection (``Connection: close``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlsplit

import h11
import trio

Handler = Callable[[str, str, dict[str, str]], Awaitable[tuple[int, str, bytes]]]


async def _connection(stream: trio.SocketStream, handler: Handler) -> None:
    conn = h11.Connection(h11.SERVER)
    request = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)
            if not data:
                return
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            break
        elif isinstance(event, h11.ConnectionClosed):
            return
    target = urlsplit(request.target.decode())
    status, ctype, body = await handler(request.method.decode(), target.path, dict(parse_qsl(target.query)))
    headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Connection", "close")]
    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
    await stream.send_all(conn.send(h11.Data(data=body)))
    await stream.send_all(conn.send(h11.EndOfMessage()))
    await stream.aclose()


async def serve(nursery: trio.Nursery, handler: Handler) -> str:
    """Start the double; returns ``http://127.0.0.1:<port>``."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def one(stream: trio.SocketStream) -> None:
        try:
            await _connection(stream, handler)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass

    nursery.start_soon(trio.serve_listeners, one, listeners)
    return f"http://127.0.0.1:{port}"


def plugin_tool(module, plugin_name: str, config, settings: dict | None = None):
    """The single tool ``module`` registers for ``config``, as ``async call(**args)``
    that validates the arguments against the tool's schema first."""
    import jsonschema

    from ongridd.plugins.api import PluginContext

    ctx = PluginContext(config=config, plugin_name=plugin_name, settings=settings or {})
    got = []
    module.ongrid_register_tools(register=got.append, context=ctx)
    (tool,) = got

    async def call(**args):
        jsonschema.Draft202012Validator(tool.parameters).validate(args)
        return await tool.handler(args, None)

    return call
