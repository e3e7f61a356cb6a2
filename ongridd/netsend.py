"""Sending on a Trio socket stream without a scheduler pass when the kernel
takes the data at once.

:meth:`trio.SocketStream.send_all` always passes through the scheduler,
even when the kernel's send buffer takes the whole write (the usual case
for a chat frame or a model request): a cancel-scope check, the ``send``
and a yield to every other runnable task.  On the daemon's hot paths —
a frame to a chat client, a request to the model — that pass costs about
as much as the ``send`` itself.  :func:`write_now` writes straight to the
socket's file descriptor and returns what the kernel did not take (a full
send buffer: a peer that does not read), which the caller then sends with
``send_all`` as usual; :func:`send_all_now` does both.
"""

from __future__ import annotations

import errno
import os

import trio


def write_now(stream: trio.abc.SendStream, data: bytes) -> bytes | memoryview:
    """Write to ``stream``'s socket what it takes of ``data`` at once, without
    blocking or a checkpoint; returns the part not written (empty when all
    was).  Only a plain :class:`trio.SocketStream` is written to; for any
    other stream (TLS, a test's memory stream) or a closed one nothing is,
    and ``data`` comes back whole.  The caller must not send on ``stream``
    from two tasks at once (hold a lock, as for ``send_all``).

    Raises ``trio.BrokenResourceError`` when the peer is gone (reset,
    broken pipe) and ``trio.ClosedResourceError`` for a closed socket, as
    ``send_all`` does."""
    if type(stream) is not trio.SocketStream or stream.socket.did_shutdown_SHUT_WR or not data:
        return data  # send_all raises for a stream whose sending side was shut down
    fd = stream.socket.fileno()
    if fd < 0:
        return data  # closed: send_all raises
    try:
        sent = os.write(fd, data)  # Trio's sockets are non-blocking
    except BlockingIOError:
        return data
    except OSError as exc:
        if exc.errno == errno.EBADF:
            raise trio.ClosedResourceError("this socket was already closed") from None
        raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
    return memoryview(data)[sent:] if sent < len(data) else b""


async def send_all_now(stream: trio.abc.SendStream, data: bytes) -> None:
    """Send every byte of ``data`` on ``stream``: what the socket takes at
    once by :func:`write_now` (no scheduler pass), the rest with
    ``stream.send_all`` (a checkpoint; cancelled there, the data may be left
    partly sent, as with ``send_all`` itself).  Already cancelled, it sends
    nothing and raises ``trio.Cancelled``, as ``send_all`` does.

    Raises ``trio.BrokenResourceError`` when the peer is gone and
    ``trio.ClosedResourceError`` when ``stream`` was closed, as
    ``send_all`` does."""
    await trio.lowlevel.checkpoint_if_cancelled()  # (no yield unless cancelled)
    rest = write_now(stream, data)
    if rest:
        await stream.send_all(rest)
