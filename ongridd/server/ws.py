"""The chat socket (docs/architecture.md §15.5).

A plain handshake is read off its TCP connection by the daemon's front door
(:mod:`ongridd.server.directws`), which serves the socket over a
:class:`~ongridd.server.directws.DirectSocket`; any other (an escaped path,
an unusual head) reaches :class:`ChatSocketFront`, in front of the HTTP app,
over an :class:`AsgiSocket`.  Either way: the handshake's origin check
(:func:`handshake_problem`), then :func:`serve_chat_socket`.  (Through
quart's websocket layer each connection cost a request context, signals and
a task relaying every received message.)

One coroutine per connection: a reader that validates client frames and a
writer that forwards the session's event frames.  The connection never
owns a turn: turns run in the runtime's service nursery, so a client that
disconnects (this handler is cancelled) does not disturb them.  Frames
produced while no client is attached are not replayed; on re-attach the
client gets the running turn's agent tiles, or the ``final`` of a turn that
ended while it was away.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any

import trio

from ongridd import jsontext
from ongridd.errors import AuthError, Busy, NotFound, OngridError, TaskStateError
from ongridd.fifolock import FIFOLock
from ongridd.logs import Throttle, get_logger
from ongridd.metrics import WS_CLIENTS
from ongridd.server.auth import is_loopback, origin_problem
from ongridd.server.connections import (
    REFUSALS,
    abort_connection,
    framed_two_ways,
    mark_authenticated,
    peer_text,
    refuse_framed_two_ways,
)
from ongridd.typenames import type_name
from ongridd.unicodetext import valid_text

log = get_logger(__name__)
#: the ``connection_refused`` lines (a hello with a missing or wrong token): at most one a second
HELLO_REFUSALS = Throttle(1.0, "connection_refused")
#: the ``connection_closed`` lines of a socket that sent no hello: anyone may open one and wait
NO_HELLO = Throttle(1.0, "connection_closed")

MAX_FRAME_CHARS = 64 * 1024
MAX_TEXT_CHARS = 32 * 1024
#: the largest client message the server reads at all (bytes; a frame of MAX_FRAME_CHARS is at
#: most 4 bytes a character): a larger one closes the socket (1009, message too big) unread
MAX_MESSAGE_BYTES = 4 * MAX_FRAME_CHARS
#: refused hellos (wrong or missing token) one connection may send; the last is answered, then the
#: socket is closed (1008): guessing tokens costs a new connection every few tries
MAX_REFUSED_HELLOS = 5
#: seconds a connection may stay without a thread (no accepted hello, no implicit one) before
#: it is told so and closed (1008); the daemon being ready starts the clock.  Short: until then a
#: client without a token may hold a partial message of up to MAX_MESSAGE_BYTES in the server
HELLO_TIMEOUT_S = 10.0
#: past that deadline, a connection still without a thread whose close cannot be sent (its client
#: does not read) has its TCP socket closed this much later (seconds)
HELLO_ABORT_AFTER_S = 5.0
#: close code of a socket closed for what its client did or did not send (RFC 6455 "policy violation")
CLOSE_POLICY_VIOLATION = 1008


class BadFrame(Exception):
    pass


def _parse(raw: Any) -> dict:
    if isinstance(raw, bytes):
        raise BadFrame("binary frames are not accepted; send JSON text frames")
    if len(raw) > MAX_FRAME_CHARS:
        raise BadFrame(f"frame too large ({len(raw)} chars; limit {MAX_FRAME_CHARS})")
    try:
        frame = jsontext.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadFrame(f"frame is not valid JSON: {exc.msg} at char {exc.pos}") from None
    except (ValueError, RecursionError) as exc:  # NaN, 1e999, 5000-digit numbers, absurd nesting
        raise BadFrame(f"frame is not acceptable JSON: {str(exc)[:120] or type(exc).__name__}") from None
    if not isinstance(frame, dict):
        raise BadFrame(f"frame must be a JSON object, got {type_name(frame)}")
    kind = frame.get("type")
    for key, value in frame.items():
        if isinstance(value, str) and _has_lone_surrogate(value):
            raise BadFrame(f"{key} holds an unpaired UTF-16 surrogate; send valid Unicode text")
    if kind not in ("hello", "user_message", "stop"):
        raise BadFrame(f"unknown frame type {kind!r}; expected hello, user_message or stop")
    for key in ("token", "thread", "locale", "task_id"):
        value = frame.get(key)
        if value is not None and not isinstance(value, str):
            raise BadFrame(f"{kind}.{key} must be a string")
    if kind == "stop" and frame.get("task_id") is not None and not frame["task_id"].strip():
        raise BadFrame("stop.task_id must be a non-empty task id; leave it out to stop the whole turn")
    if kind == "user_message":
        text = frame.get("text")
        if not isinstance(text, str) or not text.strip():
            raise BadFrame("user_message.text must be a non-empty string")
        if len(text) > MAX_TEXT_CHARS:
            raise BadFrame(f"user_message.text too long ({len(text)} chars; limit {MAX_TEXT_CHARS})")
    if kind == "hello":
        thread = frame.get("thread")
        if thread is not None and not (0 < len(thread) <= 128):
            raise BadFrame("hello.thread must be 1..128 characters")
        if thread is not None and not thread.isprintable():  # NUL, line breaks, escapes: no name of a thread
            raise BadFrame("hello.thread must be printable text (no control characters or line breaks)")
    return frame


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


MAX_BATCH = 512


async def _next(channel: Any) -> dict | None:
    """The channel's next frame, None once it is closed.  A frame already
    waiting is taken without a checkpoint: the frames waiting are finite (the
    publishers cannot add to them while the writer runs), and the writer
    yields once they are sent, waiting here for the next."""
    try:
        return channel.receive_nowait()
    except trio.WouldBlock:
        pass
    except trio.EndOfChannel:
        return None
    try:
        return await channel.receive()
    except trio.EndOfChannel:
        return None


def merge_tokens(frames: list[dict]) -> list[dict]:
    """Join runs of consecutive ``token`` frames into one (a client that
    reads slower than the model streams catches up in fewer sends)."""
    out: list[dict] = []
    for frame in frames:
        if frame.get("type") == "token" and out and out[-1].get("type") == "token":
            out[-1] = {"type": "token", "text": out[-1]["text"] + frame["text"]}
        else:
            out.append(frame)
    return out


_dump_json = jsontext.dumper(ensure_ascii=False, default=str)


def dump_frame(frame: dict) -> str:
    """JSON text of a frame; unpaired surrogates are replaced by U+FFFD so the
    frame can always be sent as UTF-8, a non-finite number by ``null`` so a browser can parse it."""
    return valid_text(_dump_json(frame))


def _peer(scope: Any) -> str | None:
    """``HOST:PORT`` of the client (``[HOST]:PORT`` for IPv6), or None."""
    return peer_text(scope.get("client"))


class _Conn:
    def __init__(self, ws: Any, services: Any):
        self.ws = ws
        self.services = services
        self.runtime = services.runtime
        self.session_id: str | None = None
        self.created = False  # this connection's hello created the thread's row
        self.user: str | None = None
        self.locale: str | None = services.config.server.default_locale
        self.send_lock = FIFOLock()
        self.nursery: trio.Nursery | None = None
        self.writer_scope: trio.CancelScope | None = None
        self.refused_hellos = 0
        #: the hello watchdog's scope, cancelled once the connection has a thread
        self.watchdog = trio.CancelScope()
        #: the close code this connection ends with (1000 unless it was closed for a policy reason)
        self.close_code = 1000

    async def send(self, frame: dict) -> bool:
        """Send one frame; False when the socket is gone (never raises)."""
        return await self.send_many((frame,))

    async def send_many(self, frames: Iterable[dict]) -> bool:
        """Send ``frames`` in order, in one write where the socket allows it (a
        :class:`~ongridd.server.directws.DirectSocket`); False when the socket is gone
        (never raises)."""
        texts = [dump_frame(frame) for frame in frames]
        try:
            # an uncontended lock need not checkpoint (one scheduler pass less per write)
            if not self.send_lock.try_acquire():
                await self.send_lock.acquire()
            try:
                await self.ws.send_many(texts)
            finally:
                self.send_lock.release()
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        except trio.Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - the server may raise its own errors on a closed socket
            log.debug("ws_send_failed", error=repr(exc))
            return False

    async def error(self, code: str, message: str) -> None:
        await self.send({"type": "error", "code": code, "message": message})

    def client_host(self) -> str | None:
        client = self.ws.scope.get("client")
        return client[0] if client else None

    async def attach(self, frame: dict) -> None:
        thread = frame.get("thread") or "main"
        try:
            user = self.services.auth.authenticate(frame.get("token"), self.client_host())
        except AuthError as exc:
            if (fields := HELLO_REFUSALS.fields(str(exc), peer=_peer(self.ws.scope), thread=thread,
                                                reason=str(exc))) is not None:  # per reason, as HTTP's
                log.warning("connection_refused", **fields)
            raise
        if frame.get("locale"):
            from ongridd.personas.prompt import normalize_locale

            locale = normalize_locale(frame["locale"])
            if locale is None:
                raise BadFrame(f"hello.locale {frame['locale'][:40]!r} is not a language tag such as fr or zh-CN")
            self.locale = locale
        mark_authenticated(self.ws.scope)  # its messages may now be of the full size
        session_id, resumed = await self.runtime.open_thread(user_id=user, thread=thread, hold=True)
        self.user, self.session_id, self.created = user, session_id, not resumed
        self.watchdog.cancel()
        # who drives this thread (in loopback mode every local OS user is "local")
        log.info("connection", peer=_peer(self.ws.scope), user=user, thread=thread, session_id=session_id,
                 resumed=resumed)
        assert self.nursery is not None
        await self.nursery.start(self._writer, {"type": "session", "session_id": session_id, "thread": thread,
                                                "resumed": resumed})

    async def _writer(self, session_frame: dict, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        # subscribe first, then send the session frame: nothing published in
        # between can fall through the gap
        with self.runtime.subscribe(self.session_id) as (initial, channel):
            await self.send(session_frame)
            task_status.started()
            for start in range(0, len(initial), MAX_BATCH):
                if not await self.send_many(initial[start:start + MAX_BATCH]):
                    return
            while (frame := await _next(channel)) is not None:
                batch = [frame]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(channel.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if not await self.send_many(merge_tokens(batch)):
                    return
        # The hub dropped this subscriber: the client fell SUBSCRIBER_BUFFER
        # frames behind.  Say so and close, so the client re-attaches rather
        # than waiting on a connection that will never get another frame.
        await self.error("internal", "this connection fell too far behind the session's events and was "
                                     "detached; reconnect to re-attach")
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    async def handle(self, frame: dict) -> None:
        kind = frame["type"]
        if kind == "hello":
            if self.session_id is not None:
                raise BadFrame("already attached; open a new connection to change thread")
            await self.attach(frame)
            return
        if self.session_id is None:  # implicit hello: thread main, loopback user local
            await self.attach({"type": "hello"})
        if kind == "user_message":
            await self.runtime.submit(self.session_id, user_id=self.user, text=frame["text"], locale=self.locale)
        elif kind == "stop":
            await self.runtime.stop(self.session_id, user_id=self.user, task_id=frame.get("task_id"))

    async def _receive(self, hello_by: float) -> str | bytes | None:
        """The client's next message (None once it has gone); while the
        connection has no thread, waiting past ``hello_by`` (trio time)
        tells the client so and ends the connection (None, ``close_code``
        1008)."""
        if self.session_id is not None:
            return await self.ws.receive()
        with trio.move_on_at(hello_by):
            return await self.ws.receive()
        if (fields := NO_HELLO.fields(peer=_peer(self.ws.scope), reason="no hello")) is not None:
            log.warning("connection_closed", **fields)
        await self.error("unauthorized", f"no accepted hello within {HELLO_TIMEOUT_S:g} s; closing")
        self.close_code = CLOSE_POLICY_VIOLATION
        return None

    async def _hello_watchdog(self, hello_by: float) -> None:
        """A connection still without a thread ``HELLO_ABORT_AFTER_S`` past its
        hello deadline is stuck where the deadline cannot end it (sending to a
        client that does not read): its TCP socket is closed."""
        with self.watchdog:
            await trio.sleep_until(hello_by + HELLO_ABORT_AFTER_S)
        if self.session_id is None and self.ws.abort():
            if (fields := NO_HELLO.fields(peer=_peer(self.ws.scope), reason="no hello, and not reading")) is not None:
                log.warning("connection_closed", **fields)

    async def run(self) -> None:
        """Serve the connection until the client goes away, or until it is
        closed for a policy reason (``close_code`` 1008): a hello refused
        ``MAX_REFUSED_HELLOS`` times, or none accepted within
        ``HELLO_TIMEOUT_S``."""
        if self.services.auth.open_mode and is_loopback(self.client_host()):
            mark_authenticated(self.ws.scope)  # no tokens: a loopback client is known by its address
        await self.ws.accept()
        WS_CLIENTS.inc()
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                hello_by = trio.current_time() + HELLO_TIMEOUT_S
                nursery.start_soon(self._hello_watchdog, hello_by)
                while (raw := await self._receive(hello_by)) is not None:
                    try:
                        await self.handle(_parse(raw))
                    except BadFrame as exc:
                        await self.error("bad_frame", str(exc))
                    except AuthError as exc:
                        self.refused_hellos += 1
                        if self.refused_hellos >= MAX_REFUSED_HELLOS:
                            await self.error("unauthorized", f"{exc}; {self.refused_hellos} hellos refused on "
                                                             "this connection, closing it")
                            self.close_code = CLOSE_POLICY_VIOLATION
                            break
                        await self.error("unauthorized", str(exc))
                    except NotFound as exc:
                        await self.error("not_found", str(exc))
                    except TaskStateError as exc:  # e.g. stopping a worker that already ended
                        await self.error("not_found", str(exc))
                    except Busy as exc:  # nothing was run or stored
                        await self.error("busy", str(exc))
                    except OngridError as exc:
                        await self.error("internal", str(exc))
                nursery.cancel_scope.cancel()  # the client went away: the writer goes too
        finally:
            WS_CLIENTS.dec()
            if self.session_id is not None:  # an empty thread this connection created goes with it
                await self.runtime.release_thread(self.session_id, created=self.created)


#: how long the front waits for the server's ``websocket.connect`` (seconds)
CONNECT_WAIT_S = 10.0

#: close code of a socket refused because the daemon is still starting (RFC 6455 "try again later")
CLOSE_TRY_AGAIN_LATER = 1013
#: close code of a socket the daemon ends because it is stopping (RFC 6455 "going away"), and how
#: long sending it may take (seconds; a client that does not read gets none)
CLOSE_GOING_AWAY = 1001
GOING_AWAY_SEND_S = 1.0
#: the chat sockets this process serves (:func:`close_chat_sockets`)
_OPEN: set[Any] = set()  # AsgiSocket or DirectSocket


async def serve_chat_socket(ws: Any, services: Any) -> None:
    """Serve one websocket connection (an :class:`AsgiSocket` or a
    ``DirectSocket``, not yet accepted) until the client goes away, then close it (1000; 1008 when
    :class:`_Conn` ended it for a policy reason: hellos refused
    ``MAX_REFUSED_HELLOS`` times, or none accepted within ``HELLO_TIMEOUT_S``).

    A socket opened during start-up is accepted at once and its frames wait
    (unread) until the daemon is ready (``services.wait_ready()``, at most
    ``services.startup_wait_s``); when that runs out it gets one ``error``
    frame with code ``starting`` and is closed (1013).  A client that goes
    away, or cancellation (server shutdown), ends only this connection's
    tasks; running turns are untouched.  While it is served the socket is
    in the set :func:`close_chat_sockets` closes when the daemon stops.
    """
    _OPEN.add(ws)
    try:
        if not await _ready_or_refused(ws, services):
            return
        conn = _Conn(ws, services)
        await conn.run()
        code = conn.close_code
    except trio.Cancelled:
        raise
    except Exception:
        log.exception("ws_connection_failed")
        code = 1000
    finally:
        _OPEN.discard(ws)
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await ws.close(code)


async def close_chat_sockets(timeout_s: float = GOING_AWAY_SEND_S) -> int:
    """Close every chat socket this process still serves with 1001 (going away), all at once, so
    that a client can tell a stop from a crash; a send not done within ``timeout_s`` is given up (a
    client that does not read).  Returns how many were closed.  Never raises but Cancelled."""
    sockets = [s for s in list(_OPEN) if s.accepted and not s.closed]

    async def going_away(socket: Any) -> None:
        with contextlib.suppress(Exception):  # the peer may be gone already: nothing to tell it
            await socket.close(CLOSE_GOING_AWAY, "the daemon is stopping")

    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            for socket in sockets:
                nursery.start_soon(going_away, socket)
    return len(sockets)


class AsgiSocket:
    """One ASGI websocket connection as the chat socket uses it.

    ``scope``: the ASGI scope.  :meth:`receive` returns a message's text (or
    its bytes), None once the client has gone; :meth:`send` sends one text
    message (``trio.ClosedResourceError`` once the socket is closed);
    :meth:`close` closes it (refuses the handshake, HTTP 403, when not yet
    accepted), at most once; :meth:`abort` closes its TCP socket.
    (:class:`~ongridd.server.directws.DirectSocket` has the same interface.)"""

    def __init__(self, scope: Any, receive: Any, send: Any):
        self.scope = scope
        self._receive = receive
        self._send = send
        self.accepted = False
        self.closed = False

    async def accept(self) -> None:
        if not self.accepted:
            self.accepted = True
            await self._send({"type": "websocket.accept"})

    async def receive(self) -> str | bytes | None:
        while not self.closed:
            event = await self._receive()
            kind = event.get("type")
            if kind == "websocket.receive":
                text = event.get("text")
                return text if text is not None else bytes(event.get("bytes") or b"")
            if kind == "websocket.disconnect":
                self.closed = True
        return None

    async def send(self, text: str) -> None:
        if self.closed:
            raise trio.ClosedResourceError("the chat socket is closed")
        await self._send({"type": "websocket.send", "text": text})

    async def send_many(self, texts: Iterable[str]) -> None:
        """Send each of ``texts`` as one text message, in order (one ASGI event each)."""
        for text in texts:
            await self.send(text)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self.closed:
            self.closed = True
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    def abort(self) -> bool:
        """Close the TCP socket of this connection (a send or receive waiting
        on it fails); False when none was found open (see
        :func:`~ongridd.server.connections.abort_connection`)."""
        return abort_connection(self.scope)


def _headers(scope: Any, name: bytes) -> list[str]:
    """Every value of a request header (``name`` lower-case), in order; empty when absent."""
    return [value.decode("latin-1") for key, value in scope.get("headers") or () if key.lower() == name]


class ChatSocketFront:
    """ASGI app: the chat socket (a websocket to ``/ws``) answered here, every
    other request passed to ``app``.

    A handshake a browser must not make (:func:`~ongridd.server.auth.origin_problem`:
    another site's ``Origin``, or a non-loopback ``Host`` while no tokens are
    set) is refused with HTTP 403 and a ``websocket_refused`` log line; one
    over HTTP/2 with 400 (the socket speaks HTTP/1.1 only).  An HTTP request
    that carries both ``Content-Length`` and ``Transfer-Encoding`` is refused
    with 400 and its connection closed (:func:`~ongridd.server.connections.refuse_framed_two_ways`).
    Cancellation (server shutdown) ends the connection's own tasks only."""

    def __init__(self, app: Any, services: Any):
        self.app = app
        self.services = services

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket" or scope.get("path") != "/ws":
            if scope.get("type") == "http" and framed_two_ways(scope.get("headers") or ()):
                await refuse_framed_two_ways(scope, send)
                return
            await self.app(scope, receive, send)
            return
        connect: dict = {}
        with trio.move_on_after(CONNECT_WAIT_S):  # over HTTP/2 a failed stream may never send it
            connect = await receive()
        if scope.get("http_version", "1.1") not in ("1.0", "1.1"):
            await _refuse(scope, send, 400, "bad_request", "the chat socket speaks HTTP/1.1 only; "
                                                           "connect without HTTP/2")
            return
        if connect.get("type") != "websocket.connect":
            return
        problem = handshake_problem(scope, self.services)
        if problem:
            if (fields := REFUSALS.fields(peer=_peer(scope), reason=problem)) is not None:
                log.warning("websocket_refused", **fields)
            await _refuse(scope, send, 403, "forbidden", problem)
            return
        await serve_chat_socket(AsgiSocket(scope, receive, send), self.services)


def handshake_problem(scope: Any, services: Any) -> str | None:
    """Why a chat socket handshake (its ASGI-shaped ``scope``) must be refused
    (:func:`~ongridd.server.auth.origin_problem`: a browser on another site,
    or a non-loopback ``Host`` while no tokens are set), None when it may go on."""
    return origin_problem(_headers(scope, b"host"), _headers(scope, b"origin"), open_mode=services.auth.open_mode)


async def _refuse(scope: Any, send: Any, status: int, code: str, message: str) -> None:
    """Refuse a handshake: an HTTP answer (``status``, JSON body ``{"error": {"code",
    "message"}}``) where the server supports it, else a close before accept (HTTP 403)."""
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": 1000, "reason": ""})
        return
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "websocket.http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "websocket.http.response.body", "body": body, "more_body": True})
    await send({"type": "websocket.http.response.body", "body": b"", "more_body": False})


async def _ready_or_refused(ws: Any, services: Any) -> bool:
    """True once the daemon is ready (at once when it already is).  Else the
    socket is accepted, waits, and when the wait runs out gets the
    ``starting`` error frame and is closed: False."""
    ready = getattr(services, "ready", None)
    if ready is None or ready.is_set():
        return True
    await ws.accept()  # the client's handshake must not hang on a long start-up
    if await services.wait_ready():
        return True
    if (fields := REFUSALS.fields(peer=_peer(ws.scope), reason="the daemon is still starting")) is not None:
        log.warning("websocket_refused", **fields)
    try:
        await ws.send(dump_frame({"type": "error", "code": "starting",
                                  "message": "the daemon is still starting; reconnect in a moment"}))
        await ws.close(CLOSE_TRY_AGAIN_LATER, "the daemon is still starting")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except trio.Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - the server may raise its own errors on a closed socket
        log.debug("ws_send_failed", error=repr(exc))
    return False
