"""Fixes to the HTTP server (hypercorn) that keep one connection's trouble that connection's.

hypercorn 0.18 lets a protocol error of one connection escape its
connection handler (for example ``h11.LocalProtocolError: Can't send data
when our state is ERROR`` for a websocket upgrade request with a byte
pipelined behind it, or any request it answers 400 while more bytes
follow).  The exception then ends trio's ``serve_listeners`` and with it
the whole daemon: one crafted packet, no token needed.  No hypercorn
release handles it yet, so :func:`_contain_connection_errors` wraps its
per-connection handler (``hypercorn.trio.tcp_server.TCPServer.run``): an
``Exception`` there is logged (``http_connection_failed``, with the
error's type and first line) and ends only that connection, whose socket
hypercorn has closed on the way out.  Cancellation and other
``BaseException``\\ s pass through unchanged.

The wrapper also turns on TCP keepalive for every accepted connection
(:func:`set_keepalive`): a peer that vanished without closing is dropped
by the kernel within minutes instead of holding its connection for ever.
And it keeps the set of connections in progress, so that a stop
is never held by a client that stopped reading: hypercorn sends under a
cancel shield, so a send to such a client (its socket buffers full) cannot
be cancelled and would keep the daemon alive for as long as the client
stays connected.  :func:`close_stalled_connections` closes, after a grace
period, the sockets of the connections still open (a waiting send then
fails with ``ClosedResourceError``, which hypercorn handles as a closed
connection).

Three more hypercorn behaviours are changed (see :func:`harden_http_server`):
events for an ASGI app that has returned are dropped instead of waited on
(a peer that kept sending behind an answer left its connection open for
ever), websocket compression is never negotiated (an inflation bomb), and
a websocket whose message is over the size limit is closed (TCP) once the
close 1009 is sent, instead of being read and buffered on for ever.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from socket import AF_INET, AF_INET6
from typing import Any

import trio

from ongridd.errors import leaf_exceptions
from ongridd.logs import Throttle, get_logger

log = get_logger(__name__)
#: the ``websocket_refused`` lines (here, the front door and the chat socket): at most one a second, as
#: whoever connects can make them
REFUSALS = Throttle(1.0, "websocket_refused")
#: the ``websocket_message_too_big`` lines (here and the front door's sockets): a message over the
#: limit before any hello is anyone's to send
TOO_BIG = Throttle(1.0, "websocket_message_too_big")
#: the ``websocket_failed`` lines (a frame that does not parse, here and at the front door): anyone
#: who completes a handshake can send one
FAILED = Throttle(1.0, "websocket_failed")
#: the ``http_request_refused`` lines (a request framed two ways): whoever connects can make them
FRAMING_REFUSALS = Throttle(1.0, "http_request_refused")
#: the ``http_connection_failed`` lines (a connection that ended in a protocol error): a malformed
#: request can cause one
CONNECTION_FAILED = Throttle(1.0, "http_connection_failed")

#: the ASGI scope key a chat socket sets once its client is known (an accepted hello, or a loopback
#: client when no tokens are configured: :func:`mark_authenticated`); until then a message may be at
#: most PRE_AUTH_MESSAGE_BYTES, so a client without a token cannot make the server hold the full
#: message size for each of its connections
AUTHENTICATED = "ongrid.authenticated"
PRE_AUTH_MESSAGE_BYTES = 16 * 1024
#: the ASGI events that say a connection has ended
_DISCONNECTS = frozenset({"http.disconnect", "websocket.disconnect"})
#: hypercorn connection handlers (``TCPServer``) in progress, in any server of this process
_LIVE: set[Any] = set()
#: TCP keepalive of every accepted connection: a peer that vanished without closing (a laptop
#: that slept, a dropped network path) is found by the kernel's probes after this much silence
#: (seconds), probed every KEEPALIVE_INTERVAL_S, given up after KEEPALIVE_PROBES unanswered probes
KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_PROBES = 6
#: data the peer has not acknowledged for this long (or a receive window it keeps closed: a
#: client that stopped reading) ends the connection (``TCP_USER_TIMEOUT``, milliseconds)
USER_TIMEOUT_MS = 120_000
#: events set whenever one of those ends (:func:`close_stalled_connections` waits on one)
_ENDED: set[trio.Event] = set()


def log_connection_failed(exc: BaseException) -> None:
    """Log that one connection ended in ``exc`` (its first leaf: type and first line), at most
    once a second (:data:`CONNECTION_FAILED`)."""
    leaf = leaf_exceptions(exc)[0]
    if (fields := CONNECTION_FAILED.fields(error=f"{type(leaf).__module__}.{type(leaf).__qualname__}",
                                           detail=(str(leaf).splitlines() or [""])[0][:200])) is not None:
        log.warning("http_connection_failed", **fields)


def harden_http_server() -> None:
    """Apply this module's fixes to hypercorn (idempotent; call before the
    first connection): :func:`_contain_connection_errors`,
    :func:`_drop_events_for_finished_apps`, :func:`_no_websocket_compression`,
    :func:`_connection_upkeep_not_cancelled_with_the_app`,
    :func:`_end_websocket_on_oversized_message`,
    :func:`_close_code_on_a_frame_that_does_not_parse`,
    :func:`_end_a_refused_websocket_handshake` and :func:`_http_1_only`.  Raises RuntimeError when hypercorn
    no longer has what one of them wraps, so a hypercorn upgrade cannot
    silently drop a protection."""
    _contain_connection_errors()
    _drop_events_for_finished_apps()
    _no_websocket_compression()
    _connection_upkeep_not_cancelled_with_the_app()
    _end_websocket_on_oversized_message()
    _close_code_on_a_frame_that_does_not_parse()
    _end_a_refused_websocket_handshake()
    _http_1_only()


def has_body(headers: Any) -> bool:
    """Whether a request with ``headers`` (``(name, value)`` byte pairs) carries a body:
    a ``Transfer-Encoding``, or a ``Content-Length`` other than ``0``."""
    for name, value in headers:
        name = name.lower()
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def framed_two_ways(headers: Any) -> bool:
    """Whether a request's ``headers`` (``(name, value)`` byte pairs) carry both a
    ``Content-Length`` and a ``Transfer-Encoding``: the body's end is then a matter of which
    header a reader believes, which is how a request is smuggled past a proxy that believes the
    other (RFC 9112 §6.3)."""
    seen = set()
    for name, _value in headers:
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding"):
            seen.add(name)
    return len(seen) == 2


async def refuse_framed_two_ways(scope: Any, send: Any) -> None:
    """Answer an HTTP request :func:`framed_two_ways` with 400 and ``Connection: close``, its body
    unread: RFC 9112 §6.3 has the server close the connection after answering such a request (the
    HTTP server reads the next request on it otherwise, from wherever it took the body to end), and
    log it (``http_request_refused``, throttled: anyone may send one)."""
    if (fields := FRAMING_REFUSALS.fields(peer=peer_text(scope.get("client")),
                                          reason="both Content-Length and Transfer-Encoding")) is not None:
        log.warning("http_request_refused", **fields)
    body = (b'{"error": {"code": "bad_request", "message": "a request with both Content-Length and '
            b'Transfer-Encoding is refused: send one of them"}}')
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _http_1_only() -> None:
    """Wrap hypercorn's ``H11Protocol._check_protocol`` (idempotent) so that a
    connection stays HTTP/1.1: an ``Upgrade: h2c`` request is answered in
    HTTP/1.1 (a server may ignore an upgrade), and HTTP/2's prior-knowledge
    preface (``PRI * HTTP/2.0``) is a request like any other (it gets an error
    answer, then the connection's idle timeout applies).  The daemon serves
    plain HTTP (browsers, the CLI and a reverse proxy all speak HTTP/1.1 to
    it), and hypercorn's switch to HTTP/2 on the preface had stopped the idle
    timer for good: a client sending those 24 bytes on many connections held a
    file descriptor each for ever, until ``/healthz`` went unanswered.  Raises
    RuntimeError when hypercorn no longer has what this relies on."""
    from hypercorn.protocol import h11 as h11_protocol

    protocol_cls = getattr(h11_protocol, "H11Protocol", None)
    original = getattr(protocol_cls, "_check_protocol", None)
    if original is None:
        raise RuntimeError("hypercorn.protocol.h11.H11Protocol._check_protocol is gone; keeping connections "
                           "HTTP/1.1 needs updating for this hypercorn")
    if getattr(original, "_ongrid_http_1_only", False):
        return

    async def _check_protocol(self: Any, event: Any) -> None:
        return None  # no switch to HTTP/2, by upgrade or by preface

    _check_protocol._ongrid_http_1_only = True  # type: ignore[attr-defined]
    _check_protocol.__doc__ = original.__doc__
    protocol_cls._check_protocol = _check_protocol  # type: ignore[union-attr]


def _end_a_refused_websocket_handshake() -> None:
    """Wrap hypercorn's ``WSStream.handle`` (idempotent) so that a websocket
    handshake it answers with an error (400: no ``Sec-WebSocket-Key``, a version
    other than 13, HTTP/1.0; 404: an unknown server name) ends the connection.
    hypercorn sends the response, with ``connection: close``, and marks the
    stream closed, but never ends the stream, so nothing closed the TCP
    connection: no idle timeout applies to it, and a client sending such a
    96-byte head on many connections held a file descriptor each for ever (at
    the process's limit, ``/healthz`` went unanswered).  The stream is now
    ended (``StreamClosed``) as hypercorn ends an HTTP stream after its
    response, and hypercorn closes the connection.

    A handshake with a body (:func:`has_body`), or with bytes sent behind it
    before it was accepted (RFC 6455 has the client wait for the answer), is
    refused the same way (400) before any app can accept it: hypercorn
    answered 400 but let the app's accept through, which h11 refused (an
    ERROR traceback, a close frame written onto the HTTP stream).
    Raises RuntimeError when hypercorn no longer has what this relies on."""
    from hypercorn.protocol import events, ws_stream

    stream_cls = getattr(ws_stream, "WSStream", None)
    original = getattr(stream_cls, "handle", None)
    closed_event: Any = getattr(events, "StreamClosed", None)
    request_event: Any = getattr(events, "Request", None)
    response_event: Any = getattr(events, "Response", None)
    end_body_event: Any = getattr(events, "EndBody", None)
    data_events: Any = (getattr(events, "Body", None), getattr(events, "Data", None))
    handshake_state = getattr(getattr(ws_stream, "ASGIWebsocketState", None), "HANDSHAKE", None)
    if original is None or None in (closed_event, request_event, response_event, end_body_event, handshake_state,
                                    *data_events):
        raise RuntimeError("hypercorn.protocol.ws_stream.WSStream.handle is gone; ending a refused websocket "
                           "handshake needs updating for this hypercorn")
    if getattr(original, "_ongrid_ends_refusals", False):
        return

    async def handle(self: Any, event: Any) -> None:
        was_closed = self.closed
        refused = None
        if not was_closed and isinstance(event, request_event) and has_body(event.headers):
            refused = "a handshake with a body"
        elif (not was_closed and isinstance(event, data_events)
              and not getattr(getattr(self, "handshake", None), "accepted", True)):
            if self.state is not handshake_state:
                return  # answered already (the app's refusal is on its way): the bytes are dropped
            refused = "data sent before the handshake was answered"
        if refused is not None:
            # the answer hypercorn gives a handshake it finds invalid, then the end of the stream; closed
            # first, so an accept the app sends meanwhile is dropped
            if (fields := REFUSALS.fields(peer=peer_text(self.client), reason=refused)) is not None:
                log.warning("websocket_refused", **fields)
            self.closed = True
            await self.send(response_event(stream_id=self.stream_id, status_code=400,
                                           headers=[(b"content-length", b"0"), (b"connection", b"close")]))
            await self.send(end_body_event(stream_id=self.stream_id))
            await self.send(closed_event(stream_id=self.stream_id))
            return
        await original(self, event)
        if self.closed and not was_closed and not isinstance(event, closed_event):
            # refused with an error response (the only way handle() closes on another event)
            await self.send(closed_event(stream_id=self.stream_id))

    handle._ongrid_ends_refusals = True  # type: ignore[attr-defined]
    handle.__doc__ = original.__doc__
    stream_cls.handle = handle  # type: ignore[union-attr]


def _contain_connection_errors() -> None:
    """Wrap hypercorn's per-connection handler once (idempotent)."""
    from hypercorn.trio.tcp_server import TCPServer

    original = getattr(TCPServer, "run", None)
    if original is None:
        raise RuntimeError("hypercorn.trio.tcp_server.TCPServer.run is gone; the per-connection "
                           "error containment needs updating for this hypercorn")
    if getattr(original, "_ongrid_contained", False):
        return

    async def run(self: Any) -> None:
        with live_connection(self):
            set_keepalive(_socket_of(self))
            try:
                await original(self)
            except Exception as exc:  # noqa: BLE001 - one connection's protocol error must not end the server
                log_connection_failed(exc)

    run._ongrid_contained = True  # type: ignore[attr-defined]
    run.__doc__ = original.__doc__
    TCPServer.run = run  # type: ignore[method-assign]


@contextlib.contextmanager
def live_connection(handler: Any) -> Iterator[None]:
    """Count ``handler`` among the connections in progress while the block
    runs (:func:`open_connections`, :func:`close_stalled_connections`,
    :func:`abort_connection`).  ``handler``: hypercorn's ``TCPServer``, or
    one with the same ``app`` and ``stream`` and its peer's addresses as
    ``client`` and ``server``."""
    _LIVE.add(handler)
    try:
        yield
    finally:
        _LIVE.discard(handler)
        if _ENDED:
            for ended in list(_ENDED):
                ended.set()


def _addresses(handler: Any) -> tuple[Any, Any]:
    """The client and server addresses a connection handler read when its connection began
    (hypercorn's are on its protocol object; a socket the peer has reset no longer tells them)."""
    holder = getattr(handler, "protocol", handler)
    return getattr(holder, "client", None), getattr(holder, "server", None)


def _drop_events_for_finished_apps() -> None:
    """Wrap hypercorn's ``TaskGroup.spawn_app`` (idempotent) so that, once an
    ASGI app has returned, what the server still has for it (request body
    chunks, websocket messages, the disconnect) is dropped.  hypercorn queues
    those for the app (10 at most) and then waits for room that never comes:
    the connection's reader stops reading, and a peer that sent more than ten
    events behind an answer (a large body answered 413 unread, frames behind
    a websocket the app closed) left its connection open for ever, in
    CLOSE-WAIT once the peer went away.  And the end of a connection
    (``http.disconnect``, ``websocket.disconnect``) is never waited on:
    hypercorn reports it from inside the app's own task when a send of the
    app's fails, and waiting there for room in a full queue waited on itself
    (a flooding client that did not read, then reset, left its task and
    memory behind for good); an app that cannot be told is cancelled.
    Raises RuntimeError when hypercorn no longer has what this wraps."""
    from hypercorn.trio import task_group

    group = getattr(task_group, "TaskGroup", None)
    handle = getattr(task_group, "_handle", None)
    original = getattr(group, "spawn_app", None)
    if group is None or handle is None or original is None:
        raise RuntimeError("hypercorn.trio.task_group.TaskGroup.spawn_app is gone; dropping the events of "
                           "finished apps needs updating for this hypercorn")
    if getattr(original, "_ongrid_drops", False):
        return

    async def spawn_app(self: Any, app: Any, config: Any, scope: Any, send: Any) -> Any:
        put, take = trio.open_memory_channel[Any](config.max_app_queue_size)
        app_scope = trio.CancelScope()

        async def app_then_close(*args: Any) -> None:
            try:
                with app_scope:
                    await app(*args)
            finally:
                # the app has returned: nobody reads its events any more (closed before hypercorn
                # tells the stream so, which queues one more event for it)
                take.close()

        async def run_app() -> None:
            await handle(app_then_close, config, scope, take.receive, send, trio.to_thread.run_sync,
                         trio.from_thread.run)

        async def deliver(event: Any) -> None:
            try:
                if event.get("type") not in _DISCONNECTS:
                    await put.send(event)  # the reader waits for room: back-pressure on the peer
                    return
                # The connection is gone.  hypercorn may say so from inside the app's own task (a
                # send of the app's failed), so this must not wait for room the app would make:
                # an app whose queue is full cannot be told in order, and is cancelled.
                put.send_nowait(event)
            except trio.WouldBlock:
                app_scope.cancel()
            except trio.BrokenResourceError:
                pass  # the app has returned; the event means nothing to it now

        self._nursery.start_soon(run_app)
        return deliver

    spawn_app._ongrid_drops = True  # type: ignore[attr-defined]
    group.spawn_app = spawn_app


def _no_websocket_compression() -> None:
    """Wrap hypercorn's websocket handshake (idempotent) so that it never
    negotiates ``permessage-deflate``.  The compressed data of a message is
    inflated whole before the message size limit is checked: a 255 KiB frame
    of compressed zeros became 256 MiB in the daemon, no token needed.  The
    chat socket's frames are small JSON; browsers and the CLI connect
    without compression just the same."""
    from hypercorn.protocol import ws_stream

    handshake = getattr(ws_stream, "Handshake", None)
    original = getattr(handshake, "accept", None)
    if handshake is None or original is None:
        raise RuntimeError("hypercorn.protocol.ws_stream.Handshake.accept is gone; turning websocket "
                           "compression off needs updating for this hypercorn")
    if getattr(original, "_ongrid_plain", False):
        return

    def accept(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.extensions = None  # as if the client offered no extension: none is negotiated
        return original(self, *args, **kwargs)

    accept._ongrid_plain = True  # type: ignore[attr-defined]
    handshake.accept = accept


def _connection_upkeep_not_cancelled_with_the_app() -> None:
    """Wrap hypercorn's ``TCPServer.protocol_send`` (idempotent) so that the
    connection's own upkeep — restarting its idle timer once a response is
    sent, closing it after a ``Connection: close`` or HTTP/1.0 answer — runs
    under a cancel shield.  hypercorn runs that upkeep in the app's task,
    and quart-trio cancels that task as soon as the request is answered:
    the idle timer was never started and the close never finished, so every
    HTTP/1.x connection that had served a request stayed open until the
    client closed it.  Both steps are short and never wait on the peer."""
    from hypercorn.events import Closed, Updated
    from hypercorn.trio.tcp_server import TCPServer

    original = getattr(TCPServer, "protocol_send", None)
    if original is None or not hasattr(TCPServer, "_close") or not hasattr(TCPServer, "_idle_timeout"):
        raise RuntimeError("hypercorn.trio.tcp_server.TCPServer.protocol_send is gone; the connection upkeep "
                           "fix needs updating for this hypercorn")
    if getattr(original, "_ongrid_upkeep", False):
        return

    async def protocol_send(self: Any, event: Any) -> None:
        if isinstance(event, Closed):
            with trio.CancelScope(shield=True):
                await self._close()
            await self.protocol.handle(Closed())
        elif isinstance(event, Updated):
            with trio.CancelScope(shield=True):
                if event.idle:
                    await self.idle_task.restart(self._task_group, self._idle_timeout)
                else:
                    await self.idle_task.stop()
        else:
            await original(self, event)

    protocol_send._ongrid_upkeep = True  # type: ignore[attr-defined]
    TCPServer.protocol_send = protocol_send  # type: ignore[method-assign]


def peer_text(client: Any) -> str | None:
    """``HOST:PORT`` of an ASGI ``client`` address pair (``[HOST]:PORT`` for IPv6), or None."""
    if not client:
        return None
    host, port = client[0], client[1] if len(client) > 1 else None
    shown = f"[{host}]" if ":" in str(host) else str(host)
    return f"{shown}:{port}" if port is not None else shown


def _end_websocket_on_oversized_message() -> None:
    """Wrap hypercorn's ``WSStream._handle_events`` (idempotent) so that a
    websocket message over ``websocket_max_message_size`` ends the
    connection.  hypercorn sends the close (1009, message too big) but then
    goes on reading the socket: wsproto keeps parsing what follows and
    hypercorn keeps appending it to the message buffer it never clears, so
    a client that announced a 2 GiB frame and streamed its payload grew the
    daemon by as much as it sent, before any token was checked.  Once that
    buffer is over the limit (the 1009 is on its way) it is dropped and the
    stream is ended as if the client had closed it (``StreamClosed``: the
    app gets ``websocket.disconnect``, hypercorn closes the TCP connection
    and its reader stops); nothing more is read from that connection.
    Until the app marks the connection's client as known
    (:func:`mark_authenticated`) the limit is :data:`PRE_AUTH_MESSAGE_BYTES`.
    Raises RuntimeError when hypercorn no longer has what this relies on."""
    from hypercorn.protocol import events, ws_stream

    stream_cls = getattr(ws_stream, "WSStream", None)
    original = getattr(stream_cls, "_handle_events", None)
    closed_event = getattr(events, "StreamClosed", None)
    buffer = ws_stream.WebsocketBuffer(1) if hasattr(ws_stream, "WebsocketBuffer") else None
    if (original is None or closed_event is None or not hasattr(buffer, "length")
            or not hasattr(buffer, "max_length") or not hasattr(buffer, "clear")):
        raise RuntimeError("hypercorn.protocol.ws_stream.WSStream._handle_events or its WebsocketBuffer "
                           "changed; ending websockets with an oversized message needs updating for "
                           "this hypercorn")
    if getattr(original, "_ongrid_bounded", False):
        return

    async def _handle_events(self: Any) -> None:
        full = self.config.websocket_max_message_size
        scope = getattr(self, "scope", None)  # set once the upgrade request is read
        known = isinstance(scope, dict) and scope.get(AUTHENTICATED) is True
        self.buffer.max_length = full if known else min(full, PRE_AUTH_MESSAGE_BYTES)
        await original(self)
        # hypercorn raised (and caught) its FrameTooLargeError, and sent the close 1009, exactly
        # when the message buffer went over the limit; it never clears the buffer after that
        if self.closed or self.buffer.length <= self.buffer.max_length:
            return
        limit = self.buffer.max_length
        self.buffer.clear()
        if (fields := TOO_BIG.fields(peer=peer_text(self.client), limit=limit)) is not None:
            log.warning("websocket_message_too_big", **fields)
        await self.send(closed_event(stream_id=self.stream_id))

    _handle_events._ongrid_bounded = True  # type: ignore[attr-defined]
    _handle_events.__doc__ = original.__doc__
    stream_cls._handle_events = _handle_events  # type: ignore[union-attr]


def _close_code_on_a_frame_that_does_not_parse() -> None:
    """Wrap hypercorn's ``WSStream._handle_events`` (idempotent) so that a
    frame wsproto cannot parse (a protocol error, a text message that is not
    UTF-8) fails the connection with a close frame naming the reason (1002,
    1007) before the TCP connection ends (RFC 6455 §7.1.7): wsproto reports
    it as a ``CloseConnection`` it did not send, and hypercorn ended the
    connection without one, so the client saw only an abnormal closure.
    Set up once per stream, on its first events: the stream's event source
    notes the close frame, and its ``send`` puts that frame before the end of
    the stream.  Raises RuntimeError when hypercorn no longer has what this
    relies on."""
    from hypercorn.protocol import events, ws_stream
    from wsproto.connection import ConnectionState
    from wsproto.events import CloseConnection
    from wsproto.utilities import LocalProtocolError

    stream_cls = getattr(ws_stream, "WSStream", None)
    original = getattr(stream_cls, "_handle_events", None)
    data_event = getattr(events, "Data", None)
    if original is None or data_event is None:
        raise RuntimeError("hypercorn.protocol.ws_stream.WSStream._handle_events changed; failing a websocket "
                           "with its close code needs updating for this hypercorn")
    if getattr(original, "_ongrid_close_codes", False):
        return

    def watch(stream: Any) -> None:
        connection, send, events_of = stream.connection, stream.send, stream.connection.events
        failing: list[bytes] = []  # the close frame of a parse failure, sent before the stream ends

        def parsed() -> Any:
            for event in events_of():
                if isinstance(event, CloseConnection) and connection.state is ConnectionState.OPEN:
                    reason = (event.reason or "")[:100]
                    with contextlib.suppress(LocalProtocolError):
                        failing.append(connection.send(CloseConnection(code=event.code, reason=reason)))
                    if (fields := FAILED.fields(peer=peer_text(stream.client), code=event.code,
                                                reason=reason)) is not None:
                        log.info("websocket_failed", **fields)
                yield event

        async def send_close_first(event: Any) -> None:
            while failing:
                await send(data_event(stream_id=stream.stream_id, data=failing.pop(0)))
            await send(event)

        connection.events, stream.send = parsed, send_close_first
        stream._ongrid_watched = True

    async def _handle_events(self: Any) -> None:
        if not getattr(self, "_ongrid_watched", False):
            watch(self)
        await original(self)

    _handle_events._ongrid_close_codes = True  # type: ignore[attr-defined]
    _handle_events._ongrid_bounded = getattr(original, "_ongrid_bounded", False)  # type: ignore[attr-defined]
    _handle_events.__doc__ = original.__doc__
    stream_cls._handle_events = _handle_events  # type: ignore[union-attr]


def mark_authenticated(scope: dict[str, Any]) -> None:
    """Say that the client of this websocket ``scope`` is known: its messages may now be as large as
    the server's ``websocket_max_message_size`` (before, :data:`PRE_AUTH_MESSAGE_BYTES`)."""
    scope[AUTHENTICATED] = True


def _keepalive_options() -> tuple[tuple[int, int, int], ...]:
    """``(level, option, value)`` of :func:`set_keepalive`, for the options this system has."""
    import socket

    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES), ("TCP_USER_TIMEOUT", USER_TIMEOUT_MS)):
        if hasattr(socket, name):  # Linux; other systems keep their defaults for what they lack
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return tuple(options)


_KEEPALIVE_OPTIONS = _keepalive_options()


def set_keepalive(sock: Any) -> None:
    """Turn on TCP keepalive (and the unacknowledged-data timeout) on an
    accepted TCP socket; a socket without those options (a UNIX socket)
    or one already closed is left as it is."""
    if sock is None or getattr(sock, "family", None) not in (AF_INET, AF_INET6):
        return
    try:
        for level, option, value in _KEEPALIVE_OPTIONS:
            sock.setsockopt(level, option, value)
    except OSError as exc:  # the peer already went away
        log.debug("keepalive_not_set", error=str(exc))


def _served_by(server: Any, app: Any) -> bool:
    """Whether hypercorn's connection handler ``server`` serves ``app`` (hypercorn wraps the
    ASGI app it was given in an ``ASGIWrapper`` whose ``app`` is the original)."""
    wrapper = getattr(server, "app", None)
    return wrapper is app or getattr(wrapper, "app", None) is app


def open_connections(app: Any) -> int:
    """How many connections of the server serving ``app`` are in progress."""
    return sum(1 for server in list(_LIVE) if _served_by(server, app))


def _socket_of(server: Any) -> Any:
    stream = getattr(server, "stream", None)
    sock = getattr(stream, "socket", None)
    if sock is None:  # a TLS stream: its transport's socket
        sock = getattr(getattr(stream, "transport_stream", None), "socket", None)
    return sock


def abort_connection(scope: Any) -> bool:
    """Close the TCP socket of the connection an ASGI ``scope`` came in on
    (found by its client and server addresses); a send or receive waiting on
    it fails with ``ClosedResourceError``.  True when one was found and
    closed.  For a connection whose app cannot close it the usual way: a
    send to a peer that does not read cannot be cancelled."""
    client, server = scope.get("client"), scope.get("server")
    if not client or not server:
        return False
    for live in list(_LIVE):
        if _addresses(live) != (client, server):  # the same addresses the scope was given
            continue
        if _close_socket(live):
            return True
    return False


def _close_socket(server: Any) -> bool:
    """Close the TCP socket of hypercorn's connection handler ``server`` (a
    send or receive waiting on it fails with ``ClosedResourceError``); False
    when it has none or it is closed already."""
    sock = _socket_of(server)
    if sock is None or sock.fileno() < 0:
        return False
    sock.close()
    return True


async def close_stalled_connections(app: Any, grace_s: float) -> int:
    """Wait up to ``grace_s`` seconds for the connections serving ``app`` to
    end, then close the sockets of those still open; returns how many were
    closed (each is logged, ``connection_closed_at_stop``).

    Runs under a cancel shield (it is meant to run while the server's
    nursery is being cancelled): it returns as soon as the last connection
    has ended, at most ``grace_s`` later."""
    closed = 0
    with trio.CancelScope(shield=True):
        with trio.move_on_after(grace_s):
            while open_connections(app):
                ended = trio.Event()
                _ENDED.add(ended)
                try:
                    await ended.wait()
                finally:
                    _ENDED.discard(ended)
        for server in [s for s in list(_LIVE) if _served_by(s, app)]:
            if not _close_socket(server):
                continue
            closed += 1
            peer = peer_text(_addresses(server)[0])  # as recorded when the connection began
            log.warning("connection_closed_at_stop", peer=peer,
                        reason=f"still open {grace_s:g} s after the stop began (a client that stopped reading)")
    return closed
