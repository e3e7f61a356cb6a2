"""One HTTP connection's failure stays that connection's.

hypercorn 0.18 lets a protocol error of one connection escape its
connection handler (for example ``h11.LocalProtocolError: Can't send data
when our state is ERROR`` for a websocket upgrade request with a byte
pipelined behind it, or any request it answers 400 while more bytes
follow).  The exception then ends trio's ``serve_listeners`` and with it
the whole daemon: one crafted packet, no token needed.  No hypercorn
release handles it yet, so :func:`contain_connection_errors` wraps its
per-connection handler (``hypercorn.trio.tcp_server.TCPServer.run``): an
``Exception`` there is logged (``http_connection_failed``, with the
error's type and first line) and ends only that connection, whose socket
hypercorn has closed on the way out.  Cancellation and other
``BaseException``\\ s pass through unchanged.
"""

from __future__ import annotations

from typing import Any

from ongridd.errors import leaf_exceptions
from ongridd.logs import get_logger

log = get_logger(__name__)


def contain_connection_errors() -> None:
    """Wrap hypercorn's per-connection handler once (idempotent).  Raises
    RuntimeError when hypercorn no longer has the handler this wraps, so a
    hypercorn upgrade cannot silently drop the protection."""
    from hypercorn.trio.tcp_server import TCPServer

    original = getattr(TCPServer, "run", None)
    if original is None:
        raise RuntimeError("hypercorn.trio.tcp_server.TCPServer.run is gone; the per-connection "
                           "error containment needs updating for this hypercorn")
    if getattr(original, "_ongrid_contained", False):
        return

    async def run(self: Any) -> None:
        try:
            await original(self)
        except Exception as exc:  # noqa: BLE001 - one connection's protocol error must not end the server
            leaf = leaf_exceptions(exc)[0]
            log.warning("http_connection_failed", error=f"{type(leaf).__module__}.{type(leaf).__qualname__}",
                        detail=(str(leaf).splitlines() or [""])[0][:200])

    run._ongrid_contained = True  # type: ignore[attr-defined]
    run.__doc__ = original.__doc__
    TCPServer.run = run  # type: ignore[method-assign]
