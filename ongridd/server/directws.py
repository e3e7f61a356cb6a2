"""The chat socket served straight off its TCP connection.

hypercorn hands each accepted connection to a handler (``TCPServer``);
:func:`install` puts :class:`FrontDoor` in its place.  The front door reads
the request head.  A websocket handshake for ``/ws`` that hypercorn would
accept is answered here: the same origin check as
:class:`~ongridd.server.ws.ChatSocketFront`, then
:func:`~ongridd.server.ws.serve_chat_socket` over a :class:`DirectSocket`,
which speaks RFC 6455 through wsproto's frame layer.  Every other
connection (other paths, anything this module does not take for a plain
handshake: a body, no ``Host``, HTTP/1.0, an escaped path, a head over
hypercorn's size limit) goes to hypercorn's own handler, with the bytes
already read put back in front of the stream, and is served as before.

Why: through hypercorn a chat socket's connection went through its HTTP
protocol object, its websocket stream, an ASGI task with an event queue
and a send lock per message; a turn of six model calls spent about a
quarter of the daemon's CPU there (``benchmarks/serve_bench.py``).

What the socket keeps from hypercorn's handling, as changed by
:mod:`ongridd.server.connections`: no extension is negotiated (no
compression); a message over the size limit
(:data:`~ongridd.server.connections.PRE_AUTH_MESSAGE_BYTES` until the client
is known, then the server's ``websocket_max_message_size``) is answered with
a close 1009 and ends the connection unread; a frame that does not parse is
answered with its close code (1002, 1007) before the connection ends; pings
are answered; TCP keepalive is on; the connection counts among those a stop
waits for and may close (:func:`~ongridd.server.connections.close_stalled_connections`).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import math
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

import httptools
import trio
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.utilities import LocalProtocolError, generate_accept_token

from ongridd.fifolock import FIFOLock
from ongridd.logs import get_logger
from ongridd.netsend import write_now
from ongridd.server.connections import (AUTHENTICATED, FAILED, PRE_AUTH_MESSAGE_BYTES, REFUSALS, TOO_BIG, has_body,
                                        live_connection, log_connection_failed, peer_text, set_keepalive)

log = get_logger(__name__)

#: the most one read takes from the socket (bytes), as hypercorn's handler
MAX_RECV = 2**16
#: the request line of a chat socket handshake starts so (a query string may follow the path)
_CHAT_LINE = b"GET /ws"
_CHAT_LINE_STARTS = (_CHAT_LINE + b" ", _CHAT_LINE + b"?")
#: the request line the front door serves: exactly ``GET /ws[?query] HTTP/1.1``, nothing before it
_CHAT_REQUEST_LINE = re.compile(rb"GET /ws(?:\?[!-~]*)? HTTP/1\.1\r\n")
#: RFC 6455's protocol version, the only one spoken
_VERSION = b"13"
#: close code of a message over the size limit (RFC 6455 "message too big")
_CLOSE_TOO_BIG = 1009


def install() -> None:
    """Make hypercorn's trio server hand its connections to :class:`FrontDoor`
    (idempotent; call before it starts).  A server whose app is not a
    :class:`~ongridd.server.ws.ChatSocketFront` is served as before.  Raises
    RuntimeError when hypercorn no longer has the handler this replaces."""
    from hypercorn.trio import run

    current = getattr(run, "TCPServer", None)
    if current is None:
        raise RuntimeError("hypercorn.trio.run.TCPServer is gone; serving the chat socket directly needs "
                           "updating for this hypercorn")
    if current is FrontDoor:
        return
    FrontDoor.hypercorn_handler = current
    run.TCPServer = FrontDoor  # type: ignore[misc,assignment]


class FrontDoor:
    """One accepted connection: the chat socket's handshake is served here,
    anything else by hypercorn's handler (see the module's docstring).

    Built as hypercorn builds its handler, ``FrontDoor(app, config, context,
    state, stream)``, and awaited once.  Never raises but cancellation: a
    failure is logged (``http_connection_failed``) and ends this connection
    only.  Cancelled (the server's stop), it closes the connection."""

    #: hypercorn's own handler, for every connection not served here (set by :func:`install`)
    hypercorn_handler: Any = None

    def __init__(self, app: Any, config: Any, context: Any, state: Any, stream: Any) -> None:
        self.app, self.config, self.context, self.state, self.stream = app, config, context, state, stream
        self.client: Any = None
        self.server: Any = None
        #: when the first request head must be whole (trio time), as hypercorn's idle close of a new connection
        self.head_deadline = trio.current_time() + (config.keep_alive_timeout or math.inf)

    def __await__(self) -> Any:
        return self.run().__await__()

    async def run(self) -> None:
        """Serve the connection until it ends (see the class)."""
        from ongridd.server.ws import ChatSocketFront

        front = getattr(self.app, "app", None)
        sock = getattr(self.stream, "socket", None)
        if not isinstance(front, ChatSocketFront) or sock is None:  # another app, or TLS: hypercorn's
            await self.hypercorn_handler(self.app, self.config, self.context, self.state, self.stream)
            return
        head: bytes | None = None  # set when the connection goes to hypercorn's handler
        try:
            with live_connection(self):
                self.client, self.server = _address(sock, "getpeername"), _address(sock, "getsockname")
                read = await self._read_head()
                if read is None:  # nothing came, or not a whole head in time: as hypercorn's idle close
                    return
                request = _chat_handshake(read)
                if request is None and _bodied_upgrade(read):
                    # hypercorn would accept this upgrade, then h11 refuse the 101 it sent (a traceback,
                    # a close frame written onto the HTTP stream): refused here, and the connection ends
                    if (fields := REFUSALS.fields(peer=peer_text(self.client),
                                                  reason="a handshake with a body")) is not None:
                        log.warning("websocket_refused", **fields)
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await self.stream.send_all(_refusal(400, "bad_request", "a websocket handshake has no body"))
                elif request is None:
                    head = read  # hypercorn's handler (wrapped: it sets keepalive itself)
                else:
                    set_keepalive(sock)
                    await self._serve_chat(front, request)
        except Exception as exc:  # noqa: BLE001 - one connection's trouble must not end the server
            log_connection_failed(exc)
        finally:
            if head is None:  # served here (or cancelled: the server's stop): the connection ends
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    await _close(self.stream)
        if head is not None:
            await self.hypercorn_handler(self.app, self.config, self.context, self.state,
                                         _Replayed(self.stream, head, self.head_deadline))

    async def _read_head(self) -> bytes | None:
        """What the client sent first: the whole request head (and what came
        with it) when it starts as a chat socket's handshake, else as soon
        as it cannot be one.  None when the connection ended or the
        keep-alive timeout passed before anything could be decided."""
        limit = self.config.h11_max_incomplete_size
        data = b""
        with trio.move_on_at(self.head_deadline):
            while True:
                try:
                    chunk = await self.stream.receive_some(MAX_RECV)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return None
                if not chunk:
                    return data or None  # hypercorn answers a cut request as it does
                data += chunk
                start = data[:len(_CHAT_LINE) + 1]
                if not any(line.startswith(start) for line in _CHAT_LINE_STARTS):
                    return data  # not the chat socket
                if _head_ended(data) or len(data) > limit:
                    return data
        return None

    async def _serve_chat(self, front: Any, request: _Handshake) -> None:
        from ongridd.server.ws import handshake_problem, serve_chat_socket

        scope = {"type": "websocket", "path": "/ws", "raw_path": b"/ws", "query_string": request.query,
                 "http_version": "1.1", "scheme": "ws", "headers": request.headers,
                 "client": self.client, "server": self.server, "subprotocols": []}
        socket = DirectSocket(self.stream, scope, request, self.config.websocket_max_message_size)
        problem = handshake_problem(scope, front.services)
        if problem:
            if (fields := REFUSALS.fields(peer=peer_text(self.client), reason=problem)) is not None:
                log.warning("websocket_refused", **fields)
            await socket.refuse(403, "forbidden", problem)
        else:
            await serve_chat_socket(socket, front.services)


def _address(sock: Any, which: str) -> Any:
    from hypercorn.utils import parse_socket_addr

    try:
        return parse_socket_addr(sock.family, getattr(sock, which)())
    except OSError:  # the peer is gone already
        return None


async def _close(stream: Any) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError,
                             AttributeError):
        await stream.send_eof()
    await stream.aclose()


class _Handshake:
    """A request head read as a websocket handshake: ``headers`` (name lower-cased, value),
    ``query`` (the query string), ``key`` (``Sec-WebSocket-Key``), ``rest`` (bytes after the head)."""

    __slots__ = ("headers", "query", "key", "rest")

    def __init__(self, headers: list[tuple[bytes, bytes]], query: bytes, key: bytes, rest: bytes) -> None:
        self.headers, self.query, self.key, self.rest = headers, query, key, rest


class _HeadReader:
    """httptools' callbacks: the target and the headers of one request head."""

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.complete = True


def _refusal(status: int, code: str, message: str) -> bytes:
    """An HTTP response ending the connection: ``status`` and the JSON body ``{"error": {"code", "message"}}``."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def _chat_head(data: bytes) -> tuple[list[tuple[bytes, bytes]], bytes, int] | None:
    """The head at the start of ``data`` when it is a whole ``GET /ws[?query] HTTP/1.1``
    request head that httptools parses, with CRLF line ends only: ``(headers (name
    lower-cased, value), query, end of the head)``; else None."""
    end = data.find(b"\r\n\r\n")
    if end < 0 or not _CHAT_REQUEST_LINE.match(data):
        return None
    head = data[:end + 4]
    crlf = head.count(b"\r\n")
    if head.count(b"\n") != crlf or head.count(b"\r") != crlf:
        return None  # a bare LF or CR: hypercorn's parser decides what such a head is
    reader = _HeadReader()
    parser = httptools.HttpRequestParser(reader)
    try:
        parser.feed_data(head)
    except httptools.HttpParserUpgrade:
        pass
    except httptools.HttpParserError:
        return None
    if not reader.complete or parser.get_method() != b"GET" or parser.get_http_version() != "1.1":
        return None
    path, _, query = reader.url.partition(b"?")
    if path != b"/ws":
        return None
    return reader.headers, query, end + 4


def _bodied_upgrade(data: bytes) -> bool:
    """Whether ``data`` is a ``GET /ws`` head (as :func:`_chat_head` reads one) asking for a
    websocket upgrade with a body (:func:`~ongridd.server.connections.has_body`)."""
    parsed = _chat_head(data)
    if parsed is None:
        return False
    upgrade = [value for name, value in parsed[0] if name == b"upgrade"]
    return bool(upgrade) and upgrade[-1].strip().lower() == b"websocket" and has_body(parsed[0])


def _chat_handshake(data: bytes) -> _Handshake | None:
    """``data`` as a websocket handshake for ``/ws`` that hypercorn would accept
    (HTTP/1.1 ``GET``, one ``Host``, no body (``Content-Length: 0`` allowed), ``Connection: upgrade``,
    ``Upgrade: websocket``, a key, version 13); None for anything else
    (hypercorn's handler then answers it as it always did, but a handshake with
    a body: :func:`_bodied_upgrade`)."""
    parsed = _chat_head(data)
    if parsed is None:
        return None
    headers, query, end = parsed
    last: dict[bytes, bytes] = {}
    hosts = 0
    for name, value in headers:
        last[name] = value
        hosts += name == b"host"
    if hosts != 1 or has_body(headers):  # "Content-Length: 0" is no body
        return None
    tokens = [token.strip().lower() for token in last.get(b"connection", b"").split(b",")]
    key = last.get(b"sec-websocket-key")
    if (b"upgrade" not in tokens or last.get(b"upgrade", b"").strip().lower() != b"websocket"
            or not key or last.get(b"sec-websocket-version") != _VERSION):
        return None
    return _Handshake(headers, query, key, data[end:])


def _head_ended(data: bytes) -> bool:
    """Whether ``data`` holds the end of a request head (an empty line; after a bare LF too)."""
    return b"\n\r\n" in data or b"\n\n" in data


class _Replayed:
    """A stream whose first reads return ``head`` (bytes already read from
    ``stream``), then what ``stream`` receives; everything else is the
    stream's.  It has no ``do_handshake``: hypercorn takes it for plain TCP.
    Until the first request head has ended, the connection is closed at
    ``deadline`` (trio time; the read returns end of stream), as hypercorn
    closes a connection idle that long: the time the front door spent
    reading is not given again."""

    def __init__(self, stream: Any, head: bytes, deadline: float) -> None:
        self._stream = stream
        self._head = head
        self._deadline: float | None = None if _head_ended(head) else deadline
        self._tail = head[-2:]  # the end of what was read, for an empty line split across reads
        self.socket = stream.socket

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._head:
            size = len(self._head) if max_bytes is None else max_bytes
            out, self._head = self._head[:size], self._head[size:]
            await trio.lowlevel.checkpoint()
            return out
        if self._deadline is None:
            return await self._stream.receive_some(max_bytes)
        data: bytes | bytearray = b""
        with trio.move_on_at(self._deadline) as waited:
            data = await self._stream.receive_some(max_bytes)
        if waited.cancelled_caught:  # no whole head in time: closed, as an idle connection
            await self._stream.aclose()
            return b""
        seen = self._tail + bytes(data)
        if not data or _head_ended(seen):
            self._deadline = None
        self._tail = seen[-2:]
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


#: frames of one read a socket handles before it lets the other tasks run (a 64 KiB read holds
#: some 10,000 frames of 6 bytes: pongs or empty fragments, which need no answer)
_EVENTS_PER_YIELD = 64


class DirectSocket:
    """The chat socket's side of one websocket connection, on its TCP stream
    (the interface of :class:`~ongridd.server.ws.AsgiSocket`).

    ``scope``: what a chat socket reads of its connection, shaped as an ASGI
    websocket scope (``client``, ``server``, ``headers``; the
    ``AUTHENTICATED`` mark raises the message size limit).
    :meth:`accept` answers the handshake (101; a client that has left by
    then is found gone by the next receive); :meth:`receive` returns a
    message's text (or its bytes), None once the client has gone or the
    connection has failed; :meth:`send` sends one text message
    (``trio.ClosedResourceError`` once the socket is closed,
    ``trio.BrokenResourceError`` when the peer is gone); :meth:`close`
    sends a close frame (refuses the handshake, HTTP 403, when not yet
    accepted), at most once; :meth:`abort` closes the TCP socket.  Sends are
    shielded from cancellation, as hypercorn's are: a frame is never cut
    short, and a send to a client that does not read waits until the socket
    is closed."""

    def __init__(self, stream: Any, scope: dict, request: _Handshake, max_message: int) -> None:
        self.scope = scope
        self.accepted = False
        self.closed = False
        self._stream = stream
        self._request = request
        self._max_message = max_message
        self._ws = Connection(ConnectionType.SERVER)  # no extensions: nothing is negotiated
        self._lock = FIFOLock()
        self._answered = False  # the handshake has had its answer (101, or a refusal)

    async def accept(self) -> None:
        if self.accepted or self._answered:
            return
        self.accepted = self._answered = True
        try:
            await self._write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                              b"sec-websocket-accept: " + generate_accept_token(self._request.key) + b"\r\n\r\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the client left before its answer: receive() says it has gone
        rest, self._request.rest = self._request.rest, b""
        if rest:
            self._ws.receive_data(rest)

    async def refuse(self, status: int, code: str, message: str) -> None:
        """Answer the handshake with HTTP ``status`` and the JSON body
        ``{"error": {"code", "message"}}``, then the connection ends."""
        if self._answered:
            return
        self._answered = self.closed = True
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):  # the client left already
            await self._write(_refusal(status, code, message))

    async def receive(self) -> str | bytes | None:
        # the message so far: its size is what the limit counts, and nothing is kept per piece (a
        # message sent as endless empty fragments holds no more memory than its payload)
        message: Any = None
        size = 0
        read = False  # a receive_some since the last yield to other tasks
        events = 0  # events handled since then
        while not self.closed:
            for event in self._ws.events():
                events += 1
                if events >= _EVENTS_PER_YIELD:  # a read full of pongs or empty fragments, as below
                    events = 0
                    await trio.lowlevel.cancel_shielded_checkpoint()
                if isinstance(event, (TextMessage, BytesMessage)):
                    size += len(event.data)
                    if size > self._limit():
                        await self._too_big()
                        return None
                    if message is None:
                        message = io.StringIO() if isinstance(event, TextMessage) else io.BytesIO()
                    message.write(event.data)
                    if event.message_finished:
                        if not read:
                            # a message that arrived with earlier ones: let the other tasks run first,
                            # or one read of small frames (each answered by a write that need not
                            # yield) would hold the event loop; shielded: the message is taken
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        return message.getvalue()
                elif isinstance(event, Ping):
                    try:
                        await self._send_event(event.response())
                    except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
                        self.closed = True  # the client has gone (or the socket is closing)
                        return None
                    await trio.lowlevel.cancel_shielded_checkpoint()  # a read full of pings, as above
                elif isinstance(event, CloseConnection):
                    await self._closed_by_peer(event)
                    return None
            try:
                data = await self._stream.receive_some(MAX_RECV)  # (always a yield)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.closed = True
                return None
            read, events = True, 0
            self._ws.receive_data(data)
        return None

    def _limit(self) -> int:
        full = self._max_message
        return full if self.scope.get(AUTHENTICATED) is True else min(full, PRE_AUTH_MESSAGE_BYTES)

    async def _too_big(self) -> None:
        limit = self._limit()
        if (fields := TOO_BIG.fields(peer=peer_text(self.scope.get("client")), limit=limit)) is not None:
            log.warning("websocket_message_too_big", **fields)
        self.closed = True
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
            await self._send_event(CloseConnection(code=_CLOSE_TOO_BIG))

    async def _closed_by_peer(self, event: CloseConnection) -> None:
        """The peer closed (answered with its own code), or a frame did not
        parse (wsproto reports that as a close it did not send: it is
        answered with that close code, and logged)."""
        self.closed = True
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
            if self._ws.state is ConnectionState.REMOTE_CLOSING:
                await self._send_event(event.response())
            elif self._ws.state is ConnectionState.OPEN:
                reason = (event.reason or "")[:100]
                if (fields := FAILED.fields(peer=peer_text(self.scope.get("client")), code=event.code,
                                            reason=reason)) is not None:
                    log.info("websocket_failed", **fields)
                await self._send_event(CloseConnection(code=event.code, reason=reason))

    async def send(self, text: str) -> None:
        await self.send_many((text,))

    async def send_many(self, texts: Iterable[str]) -> None:
        """Send each of ``texts`` as one text message, in order, in one write."""
        if self.closed:
            raise trio.ClosedResourceError("the chat socket is closed")
        try:
            data = b"".join([self._ws.send(TextMessage(data=text)) for text in texts])
        except LocalProtocolError:
            self.closed = True
            raise trio.ClosedResourceError("the chat socket is closed") from None
        await self._write(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        if not self._answered:  # before the handshake's answer: refused, as hypercorn does
            self._answered = True
            await self._write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            return
        with contextlib.suppress(LocalProtocolError):
            await self._send_event(CloseConnection(code=code, reason=reason))

    def abort(self) -> bool:
        """Close the TCP socket (a waiting send or receive fails); False when it was closed already."""
        self.closed = True
        sock = getattr(self._stream, "socket", None)
        if sock is None or sock.fileno() < 0:
            return False
        sock.close()
        return True

    async def _send_event(self, event: Any) -> None:
        await self._write(self._ws.send(event))

    async def _write(self, data: bytes) -> None:
        if not self._lock.try_acquire():  # an uncontended lock need not checkpoint
            await self._lock.acquire()
        try:
            # as hypercorn's sends: never cut a frame short (what the socket does not take at once
            # is sent shielded).  A client that does not read holds the send until its socket is
            # closed (the hello watchdog, the stop's close_stalled_connections, TCP_USER_TIMEOUT)
            rest = write_now(self._stream, data)
            if rest:
                with trio.CancelScope(shield=True):
                    await self._stream.send_all(rest)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True
            raise
        finally:
            self._lock.release()
