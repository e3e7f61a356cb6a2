"""The scripted model server: an OpenAI-compatible test double (docs/architecture.md §16).

It never pretends to be a real model: the model id is
``ongrid-scripted-model`` and every body says ``system_fingerprint:
ongrid-scripted-model``.

Endpoints (base URL ``http://HOST:PORT/v1``):

* ``POST /v1/chat/completions`` — non-streaming and SSE streaming.  The
  persona is the ``X-Ongrid-Agent`` header (``default`` when absent), the
  session the ``X-Ongrid-Session`` header (``""`` when absent); both are
  percent-decoded (the provider percent-encodes non-ASCII names).  Every call
  takes the next step of that (persona, session) cursor — a failed step
  included.  A persona missing from the script or a list used up answers
  HTTP 400 naming the persona.  A malformed body answers 400 without taking
  a step.
* ``GET /v1/models`` — one model, ``ongrid-scripted-model``.

Any other path answers 404, another method on these paths 405 (with
``Allow``), a body over 256 MiB 413 and a request head over 16 KiB 431, each
with an OpenAI-shaped JSON error body.  A body that is not usable JSON —
nested too deeply to parse included — is a malformed body (400).

HTTP: a small HTTP/1.1 server on :func:`trio.serve_listeners` with the
``h11`` protocol library (no web framework: the server shares test machines
with the daemon, so each call should cost little CPU).  Connections are kept
alive between requests (75 s idle at most, no request-count limit).  An
answer goes out in one socket write — a streamed answer too (chunked
transfer encoding, every SSE event of it at once, since no script step
delays between chunks).  A step's ``delay_s`` counts from when the request
head was parsed (the time its body takes to arrive is part of it); the whole
answer is prepared before the delay, so only the send follows it, and the
call's log line and ``record`` line come after the send.  A client that
disconnects during a step's ``delay_s`` ends that call unanswered (its
record keeps status 0 and is not written to the ``record`` file).  While a
call is pending (its ``delay_s``) the server reads at most
:data:`PIPELINE_BYTES` more of that connection (a pipelined next request
waits in the client's socket); past that it only watches for the client's
close or reset (Linux: ``EPOLLRDHUP``).  When accepting fails for want of
file descriptors (``EMFILE``/``ENFILE``) it retries every
:data:`ACCEPT_RETRY_S`, logging at most once per :data:`ACCEPT_LOG_EVERY_S`;
:func:`serve_fake_llm` first raises the process's open-file soft limit to
its hard limit.

In-process use: ``async with open_fake_llm(script) as fake:`` gives a
:class:`FakeLLM` with ``fake.base_url`` (ends with ``/v1``) and
``fake.requests`` (a :class:`RecordedRequest` per chat-completion call, in
arrival order — every one of them); ``await fake.wait_requests(n)`` waits
until ``n`` have arrived.  Or run :func:`serve_fake_llm` in a nursery with
``nursery.start``.  A :class:`FakeLLM` built directly (as ``ongrid fake-llm``
does) keeps only the most recent records (``keep_requests``): a long-running
server's memory does not grow with the calls it answers.
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
import math
import os
import select
import socket
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from email.utils import formatdate
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import attrs
import h11
import trio

from ongridd.fakellm.replies import (
    completion_body,
    estimate_usage,
    make_reply,
    stream_bodies,
)
from ongridd.fakellm.script import MissingVariable, Script, Step, coerce_script
from ongridd.logs import get_logger
from ongridd.oslimits import open_files_limit, raise_open_files_limit

MODEL_ID = "ongrid-scripted-model"
AGENT_HEADER = "X-Ongrid-Agent"
SESSION_HEADER = "X-Ongrid-Session"
_SECRET_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "proxy-authorization"})

#: the largest request body accepted (long histories are fine for a test double); more answers 413
MAX_BODY_BYTES = 256 * 1024 * 1024
#: the largest request line + headers accepted; more answers 431
MAX_HEAD_BYTES = 16 * 1024
#: how long a connection may wait for (the rest of) a request before it is closed: longer than
#: any client keeps an idle pooled connection, so a server-side close never races a client's
#: reuse of it (that looks like a model failure, "server disconnected", to a caller)
KEEP_ALIVE_S = 75.0
#: the listen backlog: a burst of hundreds of connections at once (load tests) must not overflow
#: it, or the kernel resets connections the client thinks are open
BACKLOG = 4096
#: how long a connection closed after an error answer keeps reading what the client still sends
LINGER_S = 2.0
#: while a call is pending (a step's ``delay_s``), at most this many bytes of the client's next
#: request(s) are read and kept; the rest waits in the socket until the answer is sent
PIPELINE_BYTES = 64 * 1024
#: how many records a :class:`FakeLLM` keeps by default (``keep_requests``; open_fake_llm keeps all)
KEEP_REQUESTS = 100
#: and at most this many bytes of request bodies in all (the newest record is always kept)
KEEP_REQUEST_BYTES = 32 * 1024 * 1024
#: how long accepting pauses when the process is out of file descriptors (EMFILE, ENFILE, ...)
ACCEPT_RETRY_S = 0.1
#: while accepting keeps failing that way, one log line at most per this many seconds
ACCEPT_LOG_EVERY_S = 5.0
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_RECEIVE_BYTES = 64 * 1024

_AGENT_KEY = AGENT_HEADER.lower().encode()
_SESSION_KEY = SESSION_HEADER.lower().encode()
_CHAT_PATH = b"/v1/chat/completions"
_MODELS_PATH = b"/v1/models"
_CHAT_ALLOW = b"OPTIONS, POST"
_MODELS_ALLOW = b"GET, HEAD, OPTIONS"
_JSON = b"application/json"
_SERVER = (b"server", b"ongrid-scripted-model")
_SSE_HEADERS = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
_SSE_DONE = b"data: [DONE]\n\n"

log = get_logger("ongridd.fakellm")


@attrs.define(kw_only=True)
class RecordedRequest:
    """One ``POST /v1/chat/completions`` as received.

    ``agent``/``session``: the decoded headers (``None`` when the header was
    absent).  ``headers``: every request header (lower-case names;
    credentials such as ``authorization`` are kept as ``***``).
    ``body``: the parsed JSON body (``None`` if it was not JSON).  ``step``:
    the index of the step it took (``None`` when it took none).  ``status``:
    the HTTP status answered (0 while the answer is pending, e.g. during a
    ``delay_s``).  ``body_bytes``: the size of the raw body (not written to
    the ``record`` file).
    """

    agent: str | None
    session: str | None
    headers: dict[str, str]
    body: Any
    step: int | None = None
    status: int = 0
    body_bytes: int = attrs.field(default=0, repr=False)


@attrs.frozen
class _Answer:
    """A whole HTTP answer: status, extra headers, body bytes; ``stream``:
    sent with chunked transfer encoding (an SSE stream) rather than a
    Content-Length."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ((b"content-type", _JSON),)
    stream: bool = False


class _Gone(Exception):
    """The client closed the connection, or kept it idle too long."""


def _json_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate (e.g. echoed from a request's "\ud800"): escape it
        return json.dumps(value).encode()


def _error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": "ongrid_scripted_model"}}


def _error(status: int, message: str, kind: str = "invalid_request_error",
           headers: tuple[tuple[bytes, bytes], ...] = ()) -> _Answer:
    return _Answer(status, _json_bytes(_error_body(message, kind)), ((b"content-type", _JSON), *headers))


@functools.cache
def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:  # a scripted status with no name, e.g. 599
        return b""


_date_cache: tuple[int, bytes] = (0, b"")


def _date(at: float | None = None) -> bytes:
    """The HTTP ``Date`` value of wall-clock time ``at`` (seconds since the
    epoch; default: now)."""
    global _date_cache
    now = int(time.time() if at is None else at)
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True).encode())
    return _date_cache[1]


def _render(conn: h11.Connection, answer: _Answer, *, close: bool = False, head_only: bool = False,
            sent_at: float | None = None) -> bytes:
    """The bytes of ``answer`` on ``conn`` (head, body and end in one buffer);
    advances ``conn`` to the end of our side of the exchange.  ``close``:
    tell the client the connection closes after it; ``head_only``: the answer
    to a HEAD request (no body bytes); ``sent_at``: the wall-clock time
    (seconds since the epoch) its ``Date`` header states (default: now)."""
    headers = [(b"date", _date(sent_at)), _SERVER, *answer.headers]
    if not answer.stream:
        headers.append((b"content-length", str(len(answer.body)).encode()))
    if close:
        headers.append((b"connection", b"close"))
    try:
        head = h11.Response(status_code=answer.status, headers=headers, reason=_reason(answer.status))
    except h11.LocalProtocolError as exc:  # e.g. a scripted Retry-After no header can carry
        return _render(conn, _error(500, f"the scripted answer cannot be sent as HTTP: {exc}", "server_error"),
                       close=close, head_only=head_only, sent_at=sent_at)
    parts = [conn.send(head)]
    if answer.body and not head_only:
        parts.append(conn.send(h11.Data(data=answer.body)))
    parts.append(conn.send(h11.EndOfMessage()))
    return b"".join(p for p in parts if p)


class FakeLLM:
    """The scripted model: script, per-session cursors, request log and the
    HTTP server.  ``env``: where ``${NAME}`` is looked up (default: the
    process environment, read when each step is answered).  ``record``: a
    file to which every chat-completion request is appended once answered,
    as one JSON line ``{agent, session, headers, body, step, status}``
    (credential headers as ``***``); opening it raises OSError.

    ``requests``: the :class:`RecordedRequest` of the chat-completion calls,
    in arrival order.  ``keep_requests``: how many of them it keeps — the
    most recent :data:`KEEP_REQUESTS` by default, and fewer when their bodies
    exceed :data:`KEEP_REQUEST_BYTES` in all (the newest is always kept);
    ``None`` keeps every one (what :func:`open_fake_llm` asks for), 0 none.
    ``received`` counts every call, kept or not."""

    def __init__(self, script: Script, *, env: Mapping[str, str] | None = None,
                 record: str | os.PathLike[str] | None = None,
                 keep_requests: int | None = KEEP_REQUESTS) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(f"keep_requests must be >= 0 or None, not {keep_requests}")
        self.script = script
        self.env = env
        self.keep_requests = keep_requests
        self._record = open(record, "a", encoding="utf-8") if record is not None else None  # noqa: SIM115
        self.requests: list[RecordedRequest] = []
        self.received = 0
        self.base_url: str | None = None
        self._cursors: dict[tuple[str, str], int] = {}
        self._arrivals = trio.lowlevel.ParkingLot()
        self._ids = itertools.count(1)

    # -- state ------------------------------------------------------------

    def cursor(self, persona: str, session: str = "") -> int:
        """How many steps the (persona, session) cursor has taken."""
        return self._cursors.get((persona, session), 0)

    async def wait_requests(self, count: int) -> None:
        """Wait until at least ``count`` chat-completion requests arrived
        (:attr:`received`, whether their records are kept or not).
        Cancellation: just stops waiting."""
        while self.received < count:
            await self._arrivals.park()

    def _remember(self, record: RecordedRequest) -> None:
        """Add ``record`` to :attr:`requests`, then drop the oldest beyond
        ``keep_requests`` and :data:`KEEP_REQUEST_BYTES`."""
        self.received += 1
        kept = self.requests
        kept.append(record)
        keep = self.keep_requests
        if keep is None:
            return
        if len(kept) > keep:
            del kept[:len(kept) - keep]
        size = sum(r.body_bytes for r in kept)
        drop = 0
        while size > KEEP_REQUEST_BYTES and drop < len(kept) - 1:
            size -= kept[drop].body_bytes
            drop += 1
        if drop:
            del kept[:drop]

    def take_step(self, persona: str, session: str) -> Step | str:
        """Advance the cursor of (persona, session): the step, or an error
        message when the persona is missing or its list is used up."""
        steps = self.script.personas.get(persona)
        if steps is None:
            known = ", ".join(sorted(self.script.personas)) or "none"
            return f"persona {persona!r} is not in the script {self.script.source} (personas: {known})"
        taken = self._cursors.get((persona, session), 0)
        if taken >= len(steps):
            return (
                f"the script for persona {persona!r} is used up: session {session!r} made model call "
                f"{taken + 1} and the script has {len(steps)} step(s) for it (every model call takes a step, "
                "retries included; a scripted model answers only what its script holds)"
            )
        self._cursors[(persona, session)] = taken + 1
        return steps[taken]

    def _write_record(self, record: RecordedRequest) -> None:
        if self._record is None:
            return
        fields = attrs.asdict(record, recurse=False, filter=lambda a, _v: a.name != "body_bytes")
        try:
            line = json.dumps(fields, ensure_ascii=False, default=str)
        except RecursionError:  # a body parsed at the edge of the depth limit: recorded as not JSON
            line = json.dumps({**fields, "body": None}, ensure_ascii=False, default=str)
        self._record.write(line + "\n")
        self._record.flush()

    def close(self) -> None:
        """Close the record file (idempotent)."""
        if self._record is not None:
            self._record.close()
            self._record = None

    # -- HTTP: one connection ---------------------------------------------

    async def _connection(self, stream: trio.SocketStream) -> None:
        """Serve the requests of one connection in turn until the client
        closes it, goes idle for :data:`KEEP_ALIVE_S`, or either side asks
        for a close.  A chat completion's step delay counts from when its
        request head was parsed (:func:`trio.current_time`)."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                try:
                    event = await _next_event(conn, stream)
                    if type(event) is not h11.Request:  # ConnectionClosed: a clean end between requests
                        return
                    answer = await self._route(conn, stream, event, trio.current_time())
                except h11.RemoteProtocolError as exc:  # a malformed head or body, or EOF inside one
                    if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                        status = exc.error_status_hint
                        message = ("the request head is too large" if status == 431
                                   else f"malformed HTTP request: {exc}")
                        await stream.send_all(_render(conn, _error(status, message), close=True))
                        await _linger(stream)
                    return
                if answer is not None:  # None: a chat completion, already answered
                    unread = conn.their_state is h11.SEND_BODY  # a body too large (413): the connection ends
                    await stream.send_all(_render(conn, answer, close=unread or conn.their_state is not h11.DONE,
                                                  head_only=event.method == b"HEAD"))
                    if unread:
                        await _linger(stream)
                        return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # either side asked for a close (Connection: close, HTTP/1.0)
                conn.start_next_cycle()
        except (_Gone, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        except Exception:  # a bug must cost this connection only, never the server
            log.exception("fake_llm_connection_error")
            return

    async def _route(self, conn: h11.Connection, stream: trio.SocketStream, request: h11.Request,
                     arrived: float) -> _Answer | None:
        """The answer to ``request`` (whose head was parsed at trio time
        ``arrived``), to be sent by the caller; ``None`` when it was sent here
        (a chat completion).  Raises :class:`_Gone` (or trio's broken/closed
        stream errors) when the client left before its answer went out."""
        method = request.method
        path = request.target.partition(b"?")[0]
        # h11 bounds a head that arrives in pieces; one read can bring a whole larger one
        head_size = len(method) + len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if head_size > MAX_HEAD_BYTES:
            return _error(431, "the request head is too large")  # its body is left unread: the connection ends
        answer: _Answer | None = None
        if path == _CHAT_PATH:
            allow = _CHAT_ALLOW
            if method == b"POST":
                body = await _read_body(conn, stream, request)
                if isinstance(body, _Answer):
                    return body
                await self._chat_completions(conn, stream, request, body, arrived)
                return None
        elif path == _MODELS_PATH:
            allow = _MODELS_ALLOW
            if method in (b"GET", b"HEAD"):
                payload = {"object": "list",
                           "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "ongrid"}]}
                answer = _Answer(200, _json_bytes(payload))
        else:
            answer = _error(404, f"no such endpoint: {method.decode('latin-1')} {path.decode('latin-1')} "
                                 "(the scripted model serves POST /v1/chat/completions and GET /v1/models)",
                            "not_found_error")
            allow = b""
        # any other request's body is read and dropped, so the connection stays usable
        drained = await _read_body(conn, stream, request)
        if isinstance(drained, _Answer):
            return drained
        if answer is not None:
            return answer
        if method == b"OPTIONS":
            return _Answer(200, b"", ((b"allow", allow),))
        return _error(405, f"method {method.decode('latin-1')} is not allowed on {path.decode('latin-1')} "
                           f"(allowed: {allow.decode()})", headers=((b"allow", allow),))

    async def _chat_completions(self, conn: h11.Connection, stream: trio.SocketStream, request: h11.Request,
                                raw: bytes, arrived: float) -> None:
        """Record the call, take its step and answer it on ``stream``, the
        step's ``delay_s`` after ``arrived`` (trio time: when the request head
        was parsed; a body slower than that is answered at once).  The whole
        answer is rendered before the delay, so only the send remains after
        it; the ``fake_llm_call`` log line and the ``record`` file line follow
        the send (also when the send fails).  Raises :class:`_Gone` when the
        client leaves during the delay (the call stays unanswered: status 0,
        not written to the ``record`` file), trio's broken/closed stream
        errors when the send fails.  Cancellation: during the delay, as a
        client gone (nothing logged or written); during the send, the call
        is still logged and written."""
        agent_h = session_h = None
        headers: dict[str, str] = {}
        for key, value in request.headers:
            name = key.decode("latin-1")
            text = value.decode("latin-1")
            headers[name] = "***" if name in _SECRET_HEADERS else text
            if key == _AGENT_KEY and agent_h is None:
                agent_h = text
            elif key == _SESSION_KEY and session_h is None:
                session_h = text
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError included; RecursionError: nested too deeply
            body = None
        record = RecordedRequest(
            agent=unquote(agent_h) if agent_h is not None else None,
            session=unquote(session_h) if session_h is not None else None,
            headers=headers,
            body=body,
            body_bytes=len(raw),
        )
        self._remember(record)
        self._arrivals.unpark_all()
        deadline: float | None = None  # trio time
        sent_at = time.time()  # wall-clock time, for "created" and the Date header: when the answer goes out
        try:
            step = self._take(record)
            if isinstance(step, Step):
                if step.delay_s:
                    deadline = arrived + step.delay_s
                    sent_at += max(0.0, deadline - trio.current_time())
                answer = self._answer(record, step, int(sent_at))
            else:
                answer = step
        except Exception as exc:  # a bug here must not take the server down: answer it
            log.exception("fake_llm_error", agent=record.agent, session=record.session, step=record.step)
            answer = _error(500, f"the scripted model failed: {type(exc).__name__}: {exc}", "server_error")
        wire = _render(conn, answer, close=conn.their_state is not h11.DONE, sent_at=sent_at)
        if deadline is not None and deadline > trio.current_time():
            await _wait_unless_gone(conn, stream, deadline)
        record.status = answer.status
        try:
            await stream.send_all(wire)
            # the client's wake-up often lands on this CPU (a socket wake-up hints that the sender sleeps
            # next): let it read the answer before the bookkeeping below, which is slow after an idle delay
            os.sched_yield()
        finally:
            log.info("fake_llm_call", agent=record.agent, session=record.session, step=record.step,
                     status=answer.status)
            self._write_record(record)

    def _take(self, record: RecordedRequest) -> Step | _Answer:
        """The step ``record`` takes (its index set on ``record.step``), or
        the 400 answer of a malformed body (no step taken), a persona missing
        from the script or a list used up."""
        body = record.body
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "the body must be a JSON object with a 'messages' list (no step was taken)")
        persona = record.agent if record.agent is not None else "default"
        step = self.take_step(persona, record.session or "")
        if isinstance(step, str):
            return _error(400, step)
        record.step = step.index
        return step

    def _answer(self, record: RecordedRequest, step: Step, created: int) -> _Answer:
        """The whole answer of ``step`` to ``record`` (whose body :meth:`_take`
        checked): its scripted HTTP error, a 400 naming an unset ``${NAME}``,
        or the completion — an SSE stream when the body asks ``stream``.
        ``created``: the completion's timestamp (seconds since the epoch)."""
        body = record.body
        if step.http_status is not None:
            kind = "rate_limit_error" if step.http_status == 429 else (
                "server_error" if step.http_status >= 500 else "invalid_request_error"
            )
            extra = ((b"retry-after", step.retry_after.encode("latin-1", "replace")),) \
                if step.retry_after is not None else ()
            return _error(step.http_status, f"scripted HTTP {step.http_status} ({step.where})", kind, extra)
        env = self.env if self.env is not None else os.environ
        try:
            reply = make_reply(step, body["messages"], env)
        except MissingVariable as exc:
            return _error(400, str(exc))
        requested = body.get("model")
        model = requested if isinstance(requested, str) and requested else MODEL_ID
        completion_id = f"chatcmpl-scripted-{next(self._ids)}"
        usage = estimate_usage(body["messages"], reply, step.usage)
        if not body.get("stream"):
            return _Answer(200, _json_bytes(
                completion_body(reply, completion_id=completion_id, model=model, created=created, usage=usage)))
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        events = [
            b"data: " + _json_bytes(chunk) + b"\n\n"
            for chunk in stream_bodies(reply, completion_id=completion_id, model=model, created=created,
                                       usage=usage if include_usage else None)
        ]
        events.append(_SSE_DONE)
        # no delay separates the events: the whole stream goes out in one write
        return _Answer(200, b"".join(events), _SSE_HEADERS, stream=True)

    # -- serving ----------------------------------------------------------

    async def serve(
        self, *, host: str = "127.0.0.1", port: int = 0, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled.  Calls ``task_status.started(base_url)``
        once listening, with the real bound port (``http://HOST:PORT/v1``).
        Listens on one address: ``host`` (IPv6 when it has a ``:``).
        Raises ``OSError`` if the address cannot be bound.  Cancellation
        stops the server at once (open connections and streams are cut)."""
        sock = trio.socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            await sock.bind((host, port))
            sock.listen(BACKLOG)
            bound_host, bound_port = sock.getsockname()[:2]
        except BaseException:
            sock.close()
            raise
        where = f"[{bound_host}]:{bound_port}" if sock.family == socket.AF_INET6 else f"{bound_host}:{bound_port}"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._accept, trio.SocketListener(sock), nursery)
            self.base_url = f"http://{where}/v1"
            log.info("fake_llm_listening", base_url=self.base_url, personas=sorted(self.script.personas))
            task_status.started(self.base_url)

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept connections until cancelled, each served in ``nursery``.
        Out of file descriptors (or kernel memory), accepting pauses
        :data:`ACCEPT_RETRY_S` and retries — the pending connections wait in
        the backlog until connections close — with one log line per
        :data:`ACCEPT_LOG_EVERY_S` at most.  Any other accept error ends the
        server (raised)."""
        failures = 0
        logged_at = -math.inf
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                        raise
                    failures += 1
                    now = trio.current_time()
                    if now - logged_at >= ACCEPT_LOG_EVERY_S:
                        log.warning("fake_llm_accept_failed", error=errno.errorcode.get(exc.errno, str(exc.errno)),
                                    failures=failures, retry_every_s=ACCEPT_RETRY_S,
                                    open_files_limit=open_files_limit())
                        logged_at, failures = now, 0
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                nursery.start_soon(self._serve_stream, stream)

    async def _serve_stream(self, stream: trio.SocketStream) -> None:
        try:
            await self._connection(stream)
        finally:
            await trio.aclose_forcefully(stream)


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> Any:
    """The next h11 event of the client, reading as needed.  Raises
    :class:`_Gone` when the client stays silent for :data:`KEEP_ALIVE_S`."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if conn.they_are_waiting_for_100_continue:
            go_on = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
            await stream.send_all(conn.send(go_on) or b"")
        with trio.move_on_after(KEEP_ALIVE_S):
            conn.receive_data(await stream.receive_some(_RECEIVE_BYTES))
            continue
        raise _Gone


async def _read_body(conn: h11.Connection, stream: trio.SocketStream, request: h11.Request) -> bytes | _Answer:
    """The whole body of ``request``, or a 413 answer when it is over
    :data:`MAX_BODY_BYTES` (the rest is left unread: the connection ends)."""
    for key, value in request.headers:
        if key == b"content-length" and int(value) > MAX_BODY_BYTES:  # h11 checked it is a number
            return _too_large()
    parts: list[bytes] = []
    size = 0
    while True:
        event = await _next_event(conn, stream)
        if type(event) is h11.Data:
            size += len(event.data)
            if size > MAX_BODY_BYTES:
                return _too_large()
            parts.append(event.data)
        elif type(event) is h11.EndOfMessage:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        else:  # ConnectionClosed cannot come mid-body (h11 raises), but be safe
            raise _Gone


def _too_large() -> _Answer:
    return _error(413, f"the request body is larger than {MAX_BODY_BYTES} bytes (the scripted model's limit)")


async def _linger(stream: trio.SocketStream) -> None:
    """Before closing a connection whose client may still be sending (a body
    too large, a malformed request): end our side and read what comes for a
    moment, so the close does not reset the connection before the client
    has read the error answer."""
    await stream.send_eof()
    with trio.move_on_after(LINGER_S):
        while await stream.receive_some(_RECEIVE_BYTES):
            pass


async def _wait_unless_gone(conn: h11.Connection, stream: trio.SocketStream, deadline: float) -> None:
    """Sleep until ``deadline`` (trio time) while watching the connection:
    raises :class:`_Gone` as soon as the client closes it.  Bytes it sends meanwhile (a pipelined
    request) are kept for later, up to :data:`PIPELINE_BYTES` buffered in
    all; beyond that nothing more is read (the client's sends block) and
    only a close or reset is watched for."""
    buffered = len(conn.trailing_data[0])
    with trio.move_on_at(deadline):
        while buffered < PIPELINE_BYTES:
            data = await stream.receive_some(min(_RECEIVE_BYTES, PIPELINE_BYTES - buffered))
            if not data:
                raise _Gone
            conn.receive_data(data)
            buffered += len(data)
        await _wait_hangup(stream)
        raise _Gone


async def _wait_hangup(stream: trio.SocketStream) -> None:
    """Return once the peer of ``stream`` has closed its side or reset the
    connection, without reading what it sent: ``EPOLLRDHUP`` on a private
    epoll set (itself readable once that happens).  Without epoll (not
    Linux), or when no epoll set can be made (out of file descriptors or
    kernel memory): never returns, so a close behind unread bytes goes
    unnoticed until the answer is sent."""
    rdhup = getattr(select, "EPOLLRDHUP", None)
    if rdhup is None or not hasattr(select, "epoll"):
        await trio.sleep_forever()
    try:
        watch = select.epoll()
    except OSError:  # EMFILE, ENFILE, ENOMEM: the answer is already rendered, so wait without watching
        await trio.sleep_forever()
    try:
        try:
            watch.register(stream.socket.fileno(), rdhup)
        except OSError:  # ENOMEM, ENOSPC (the user's epoll watch limit)
            await trio.sleep_forever()
        await trio.lowlevel.wait_readable(watch.fileno())
    finally:
        trio.lowlevel.notify_closing(watch.fileno())
        watch.close()


async def serve_fake_llm(
    script: Script | FakeLLM | Mapping[str, Any] | str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the scripted model until cancelled.

    ``script``: a :class:`Script`, a mapping, a YAML path, or a ready
    :class:`FakeLLM` (to keep access to its ``requests``; built here from a
    script, it keeps no records).  Use with
    ``base_url = await nursery.start(serve_fake_llm, script)``; the base URL
    ends with ``/v1`` and carries the real port when ``port`` is 0.  Raises
    :class:`~ongridd.fakellm.script.ScriptError` for a bad script before
    listening, ``OSError`` when the address cannot be bound.  First raises
    the process's open-file soft limit to its hard limit (logged as
    ``fake_llm_open_files_limit``).
    """
    fake = script if isinstance(script, FakeLLM) else FakeLLM(coerce_script(script), keep_requests=0)
    log.info("fake_llm_open_files_limit", soft_limit=raise_open_files_limit())
    await fake.serve(host=host, port=port, task_status=task_status)


@asynccontextmanager
async def open_fake_llm(
    script_or_path: Script | Mapping[str, Any] | str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[FakeLLM]:
    """Run the scripted model for the duration of the block.

    Yields the :class:`FakeLLM` once it listens: ``.base_url`` (``.../v1``),
    ``.requests`` (every chat-completion call received: ``keep_requests=None``),
    ``.wait_requests``.
    ``env`` overrides where ``${NAME}`` is looked up (default: the process
    environment).  Leaving the block stops the server.  Raises
    :class:`~ongridd.fakellm.script.ScriptError` for a bad script and
    ``OSError`` when the address cannot be bound.
    """
    fake = FakeLLM(coerce_script(script_or_path), env=env, keep_requests=None)
    bind_error: OSError | None = None
    async with trio.open_nursery() as nursery:
        try:
            await nursery.start(functools.partial(fake.serve, host=host, port=port))
        except OSError as exc:
            bind_error = exc  # raised outside the nursery, so it is not wrapped in a group
        else:
            try:
                yield fake
            finally:
                nursery.cancel_scope.cancel()
    if bind_error is not None:
        raise bind_error
