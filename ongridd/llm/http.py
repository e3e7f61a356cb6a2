"""A small HTTP/1.1 client for model APIs: keep-alive connections on Trio,
``httptools`` (the llhttp C parser) for the responses, the request heads
written here, the standard library's ``ssl`` for TLS.

Why not the SDK's HTTP stack: a streamed model call through the official
SDK costs 3–5 ms of CPU (request building, auth and retry wrappers, a
connection pool whose request-to-connection matching grows with its size,
per-chunk SSE objects), about ten times this client's
(``benchmarks/model_client_bench.py`` measures both on the same server).
This client does only what a model call needs: one request, its response
streamed or read whole, the connection kept for the next call.  (A pure-Python HTTP state machine
was still about 8% of the daemon's CPU per turn: the response is parsed in C
and a request head is a few cached byte strings joined.)

* ``base_url``: ``http://`` or ``https://`` (TLS verified against the
  system's certificate store; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` are
  honoured), with a path prefix such as ``/v1``.
* Proxies from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``,
  ``ALL_PROXY``, ``NO_PROXY``, as ``urllib`` reads them): plain HTTP goes
  through the proxy in absolute form, HTTPS through a ``CONNECT`` tunnel;
  user and password in the proxy URL become ``Proxy-Authorization: Basic``.
  Only ``http://`` proxy URLs (port 80 when none is given); another scheme
  (``https://``, ``socks5://``) makes each request fail naming it.
* ``timeout_s`` bounds the connection (TCP, TLS, tunnel), each write, each
  read, the whole response head (1xx included), and the chunk framing or
  trailers read while waiting for the next piece of body (timed from the
  first read that brought none): a peer silent that long, or trickling a
  head or framing, raises :class:`HTTPTimeout`.  A body that keeps coming,
  however slowly, is not bounded in time here.
* Request heads: the method, the target and every header are checked before
  a byte is written (a method and a header name are RFC 9110 tokens; a
  target is visible ASCII opening with ``/``, so that the absolute form
  through a proxy never names another host; a value is visible ASCII with
  spaces or tabs only between visible characters: no CR, LF, NUL or other
  control character), so a header from the configuration can never add a
  line; ``ValueError`` otherwise.  Each distinct header line is checked
  once and kept, encoded, by the client.
* Responses: the parser is strict (HTTP/1.0 or HTTP/1.1, a status of 100
  or more, CRLF line ends, no line folding, no control characters in
  values, one Content-Length, not both Content-Length and
  Transfer-Encoding; Transfer-Encoding only ``chunked``; no informational
  response with a body, which would otherwise be read as the start of the
  final response's); the head (1xx heads included) is at most
  :data:`MAX_HEAD_BYTES`, and chunk framing or trailers between two pieces
  of body at most :data:`MAX_FRAMING_BYTES`.
  A body ends by its Content-Length, its last chunk, or (neither given) the
  server's EOF; 1xx, 204 and 304 responses, and the answer to ``HEAD``, have
  none.
* A kept connection the server has closed meanwhile is noticed before the
  next request is sent on it (its socket is readable: the server's EOF) and
  dropped.  When the server closes or resets it just after the request was
  sent, before a byte of the answer, the request is sent once more, on a
  fresh connection (a server closing an idle connection did not process
  it).  A fresh connection is never resent on.  A connection is kept only
  after a response read to its end, that both sides let live
  (``Connection: close`` and HTTP/1.0 without keep-alive do not), and after
  which not a byte more arrived (over TLS, none held in the TLS layer
  either, read from the socket with the response's last record).

Errors: :class:`HTTPTimeout`, :class:`HTTPConnectionError` (refused, reset,
TLS failure, a malformed or cut-off response — ``__cause__`` is the
underlying exception), ``ValueError`` for a request that may not be sent
(an illegal method, target or header).  An HTTP error status is not an
exception here: the caller reads ``Response.status``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import select
import ssl
import urllib.request
from collections.abc import AsyncGenerator, Sequence
from urllib.parse import unquote, urlsplit

import httptools
import trio

from ongridd.netsend import send_all_now

#: a read asks for at most this many bytes
READ_CHUNK = 65536
#: the largest response head (status line and headers, informational heads included) accepted, bytes
MAX_HEAD_BYTES = 64 * 1024
#: the most bytes of a body's framing (chunk sizes and extensions, trailers) read between two pieces of body
MAX_FRAMING_BYTES = 64 * 1024
#: encoded header lines a client keeps (checked once each); values longer than _LINE_VALUE_MAX are not kept
_LINE_CACHE_SIZE = 256
_LINE_VALUE_MAX = 4096
#: encoded request lines (with the client's own headers) a client keeps, one per method and path
_START_CACHE_SIZE = 64

# RFC 9110: a token (methods, header names); a field value (after ASCII encoding): visible
# characters, spaces and tabs only between them (no control character: CR, LF, NUL, DEL, ESC...);
# a request target: visible ASCII
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?")
_TARGET = re.compile(rb"[\x21-\x7e]+")
#: header names the client writes itself (a caller's would make the framing or the origin ambiguous)
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding"})


class HTTPError(Exception):
    """The request did not get a complete response."""


class HTTPTimeout(HTTPError):
    """Nothing arrived (or could be sent, or the connection was not made) within ``timeout_s``."""


class HTTPConnectionError(HTTPError):
    """The connection failed: refused, reset, TLS, a malformed or cut-off response."""


def _origin(url: str) -> tuple[str, str, int, str]:
    """``(scheme, host, port, path prefix without a trailing slash)``; ValueError for other schemes."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, parts.hostname, port, parts.path.rstrip("/")


def _host_header(scheme: str, host: str, port: int) -> str:
    name = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return name if port == default else f"{name}:{port}"


def proxy_for(url: str) -> str | None:
    """The proxy URL the environment names for ``url``, or None (``NO_PROXY`` honoured)."""
    scheme, host, _, _ = _origin(url)
    proxies = urllib.request.getproxies_environment()
    if not proxies:
        return None
    if urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    return proxies.get(scheme) or proxies.get("all")


def _request_line(method: str, target: str) -> bytes:
    """``method target HTTP/1.1\\r\\n`` encoded, after checking both (ValueError)."""
    try:
        raw_method, raw_target = method.encode("ascii"), target.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"illegal HTTP request {method!r} {target!r}: not ASCII") from None
    if not _TOKEN.fullmatch(raw_method):
        raise ValueError(f"illegal HTTP method {method!r}: not an RFC 7230 token")
    if not _TARGET.fullmatch(raw_target):
        raise ValueError(f"illegal HTTP request target {target!r}: empty, or a blank or control character")
    return raw_method + b" " + raw_target + b" HTTP/1.1\r\n"


def _header_line(name: str, value: str) -> bytes:
    """``name: value\\r\\n`` encoded, after checking both (ValueError naming the header, never
    quoting the value: it may be a credential)."""
    try:
        raw_name = name.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"illegal HTTP header name {name!r}: not ASCII") from None
    if not _TOKEN.fullmatch(raw_name):
        raise ValueError(f"illegal HTTP header name {name!r}: not an RFC 7230 token")
    try:
        raw_value = value.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"illegal value of the HTTP header {name!r}: not ASCII") from None
    if not _FIELD_VALUE.fullmatch(raw_value):
        raise ValueError(f"illegal value of the HTTP header {name!r}: a control character (CR, LF, NUL, ...), "
                         f"or leading or trailing blanks")
    return raw_name + b": " + raw_value + b"\r\n"


class _Stop(Exception):
    """Raised in a parser callback to stop parsing the rest of a read."""


class _Reader:
    """The ``httptools`` callbacks for one response: 1xx heads skipped, the final head's
    ``status`` and ``headers`` (names lower-cased, values stripped; a chunked body's trailers are
    not kept), the body's pieces in ``body`` until taken.  ``head_done``: the final head arrived;
    ``done``: the response ended; ``until_eof``: the body ends at the server's EOF; ``late``: bytes
    arrived after the response's end (the connection must not serve another request);
    ``error``: why a response the parser accepted is refused here."""

    __slots__ = ("parser", "no_body", "status", "headers", "keep_alive", "head_done", "done", "until_eof",
                 "late", "body", "error")

    def __init__(self, no_body: bool = False) -> None:
        self.no_body = no_body  # the answer to HEAD or CONNECT: no body, whatever its head says
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.head_done = self.done = self.until_eof = self.late = False
        self.body: list[bytes] = []
        self.error: str | None = None
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        if self.done:  # a second response, or anything but blank lines, after this one
            self.late = True
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:
            return  # a trailer
        key = name.decode("latin-1").lower()
        if key == "transfer-encoding" and key in self.headers:
            self.error = "more than one Transfer-Encoding header"
            raise _Stop
        self.headers[key] = value.decode("latin-1").rstrip(" \t")

    def on_headers_complete(self) -> None:
        parser = self.parser
        status = parser.get_status_code()
        if parser.get_http_version() not in ("1.1", "1.0"):  # llhttp also takes 0.9 and 2.0
            self.error = f"HTTP/{parser.get_http_version()} is not HTTP/1.x"
            raise _Stop
        if status < 200:
            if status < 100:
                self.error = f"status {status:03d} is no HTTP status"
                raise _Stop
            if status == 101:
                self.error = "101 Switching Protocols, and no upgrade was asked for"
                raise _Stop
            headers = self.headers
            if "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
                # llhttp would read a body for it (for 104-199), and that body must never pass for the start
                # of the final response's
                self.error = f"an informational response ({status}) with a body"
                raise _Stop
            self.headers = {}  # an informational head: the final one follows
            return
        te = self.headers.get("transfer-encoding")
        if te is not None and te.lower() != "chunked":
            self.error = f"Transfer-Encoding {te[:64]!r}: only chunked is supported"
            raise _Stop
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        self.head_done = True
        if self.no_body:
            self.done = True
        elif te is None and "content-length" not in self.headers and status != 204 and status != 304:
            self.until_eof = True

    def on_body(self, body: bytes) -> None:
        if self.done or not self.head_done:
            if self.done:  # after the answer to HEAD or CONNECT
                self.late = True
            else:  # pragma: no cover - refused in on_headers_complete already: an informational body
                self.error = "a body in an informational response"
            raise _Stop
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.head_done:  # (else an informational response ended)
            self.done = True


class _HeadOnlyReader(_Reader):
    """A :class:`_Reader` for the answer to HEAD or CONNECT: a chunk after its head is late too."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(no_body=True)

    def on_chunk_header(self) -> None:
        if self.done:
            self.late = True
            raise _Stop


class _Connection:
    """One TCP (or TLS) connection; ``sock`` is the TCP socket under ``stream``.  ``reader``:
    the parser of the current response; ``received``: bytes read for it; ``head_bytes``: of them,
    those read while its head was incomplete (bounded by MAX_HEAD_BYTES); ``framing``: bytes read
    since the last piece of body (bounded by MAX_FRAMING_BYTES); ``body_by``: while ``framing``,
    the Trio time by which a piece of body must have come (``timeout_s`` after the client began
    waiting for it); ``eof``: the server's EOF was read; ``keep``: the request let the connection
    live (it did not say ``Connection: close``)."""

    __slots__ = ("stream", "sock", "reader", "reused", "received", "head_bytes", "framing", "body_by", "eof",
                 "keep")

    def __init__(self, stream: trio.abc.Stream, sock: trio.socket.SocketType) -> None:
        self.stream = stream
        self.sock = sock
        self.reader = _Reader()
        self.reused = False
        self.received = 0
        self.head_bytes = 0
        self.framing = 0
        self.body_by = 0.0
        self.eof = False
        self.keep = True

    def close(self) -> None:
        """Close at once (no TLS close_notify: the connection is dropped, not ended politely)."""
        self.sock.close()

    def looks_closed(self) -> bool:
        """A kept connection with something to read (the server's EOF, most likely) is not reusable.
        ``poll``, not ``select``: a descriptor numbered past FD_SETSIZE (1024) is fine.

        Asked on every reuse, however recently the connection was given back (it costs about half
        a microsecond): besides an EOF, which the resend on a fresh connection would cover, it
        catches bytes the server sent after its last response ended (a 408 before an idle close, a
        stray second response), which nothing else would tell from the answer to the next
        request.

        Over TLS, bytes already read from the socket and held in the TLS layer (a record of their
        own that came in the same segment as the response's last) count too: polling the socket
        does not see them."""
        stream = self.stream
        if isinstance(stream, trio.SSLStream):
            # Trio keeps them private (``_incoming``: the read BIO, ``_ssl_object``: decrypted bytes);
            # should a Trio release rename them, no TLS connection is reused rather than one unchecked
            incoming, tls = getattr(stream, "_incoming", None), getattr(stream, "_ssl_object", None)
            if incoming is None or tls is None or incoming.pending or tls.pending():
                return True
        try:
            fd = self.sock.fileno()
            if fd < 0:
                return True
            if not hasattr(select, "poll"):  # pragma: no cover - Windows
                return bool(select.select([fd], [], [], 0)[0])
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI)
            return bool(poller.poll(0))  # POLLHUP, POLLERR and POLLNVAL are reported too
        except (OSError, ValueError):
            return True


class Response:
    """A response whose head has arrived.  ``status``: the HTTP status;
    ``headers``: names lower-cased (a repeated name keeps its last value).

    Read the body with :meth:`aiter_bytes` or :meth:`read`, then
    :meth:`aclose` (always: it returns the connection to the pool when the
    body was read to its end, and closes it otherwise)."""

    def __init__(self, client: HTTPClient, conn: _Connection, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._client = client
        self._conn: _Connection | None = conn
        self._done = False

    async def aiter_bytes(self) -> AsyncGenerator[bytes, None]:
        """The body's bytes as they arrive (non-empty pieces, at most one per read from the
        connection).  Raises HTTPTimeout / HTTPConnectionError.  Cancellation: the wait for the
        next bytes is cancelled; :meth:`aclose` then closes the connection."""
        conn = self._conn
        if conn is None or self._done:
            return
        reader = conn.reader
        while True:
            if reader.body:
                pieces, reader.body = reader.body, []
                yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
            elif reader.done:
                self._done = True
                return
            else:
                await self._client._receive(conn)

    def at_end(self) -> bool:
        """Whether the whole body has arrived and been taken (:meth:`aiter_bytes` would end at
        once, without a read); when it has, the body counts as read to its end, as if iterated
        (:meth:`aclose` keeps the connection)."""
        conn = self._conn
        if not self._done and conn is not None and conn.reader.done and not conn.reader.body:
            self._done = True
        return self._done

    async def read(self, limit: int) -> bytes:
        """The whole body, at most ``limit`` bytes (a longer body is cut
        there and the connection is closed by :meth:`aclose`)."""
        parts: list[bytes] = []
        size = 0
        async with contextlib.aclosing(self.aiter_bytes()) as body:
            async for data in body:
                parts.append(data)
                size += len(data)
                if size >= limit:
                    break
        return b"".join(parts)[:limit]

    async def aclose(self) -> None:
        """Give the connection back (body fully read, both sides willing to
        keep it, and not a byte sent beyond this response: bytes nobody asked
        for must never pass for the next request's answer) or close it.
        Idempotent; safe in a cancelled task."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        reader = conn.reader
        if self._done and reader.keep_alive and conn.keep and not reader.late and not conn.eof:
            self._client._give_back(conn)
            return
        conn.close()


class HTTPClient:
    """Keep-alive HTTP/1.1 connections to one origin (see the module docstring).

    ``max_idle``: connections kept open between requests (more may be open
    while requests run; the caller bounds those).  One client serves
    concurrent requests; each request uses its own connection.  ValueError
    for a URL that is not ``http(s)://``, or whose host (or ``user_agent``)
    cannot be written in a request head.
    """

    def __init__(self, base_url: str, *, timeout_s: float, max_idle: int = 64, user_agent: str = "ongrid") -> None:
        self.scheme, self.host, self.port, self.prefix = _origin(base_url)
        self.timeout_s = float(timeout_s)
        self.max_idle = max_idle
        self.user_agent = user_agent
        self._authority = _host_header(self.scheme, self.host, self.port)
        self._idle: list[_Connection] = []
        self._closed = False
        self._ssl: ssl.SSLContext | None = None
        proxy = proxy_for(base_url)
        self._proxy: tuple[str, str, int, str | None] | None = None
        if proxy:
            parts = urlsplit(proxy if "://" in proxy else "http://" + proxy)
            auth = None
            if parts.username is not None:
                pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
                auth = "Basic " + base64.b64encode(pair).decode("ascii")
            # no port: the scheme's default, as urllib, requests and httpx read a proxy URL
            self._proxy = (parts.scheme.lower() or "http", parts.hostname or "", parts.port or 80, auth)
        # the client's own headers, checked once: Host, User-Agent, and Proxy-Authorization in
        # absolute form through a plain HTTP proxy
        self._absolute = self._proxy is not None and self.scheme == "http"
        own = _header_line("Host", self._authority) + _header_line("User-Agent", user_agent)
        if self._absolute and self._proxy is not None and self._proxy[3]:
            own += _header_line("Proxy-Authorization", self._proxy[3])
        self._own = own
        self._tunnel_head = b""
        if self._proxy is not None and self.scheme == "https":
            authority = f"{self.host}:{self.port}" if ":" not in self.host else f"[{self.host}]:{self.port}"
            self._tunnel_head = _request_line("CONNECT", authority) + _header_line("Host", authority) + (
                _header_line("Proxy-Authorization", self._proxy[3]) if self._proxy[3] else b"") + b"\r\n"
        # (method, path) -> request line and own headers; (name, value) -> (header line, says close)
        self._starts: dict[tuple[str, str], bytes] = {}
        self._lines: dict[tuple[str, str], tuple[bytes, bool]] = {}

    def url(self, path: str) -> str:
        """The full URL of ``path`` (relative to the base URL's prefix)."""
        return f"{self.scheme}://{self._authority}{self.prefix}{path}"

    async def request(self, method: str, path: str, *, headers: Sequence[tuple[str, str]] = (),
                      body: bytes | None = None) -> Response:
        """Send one request and wait for the response head.  ``path`` is
        relative to the base URL's prefix (``"/chat/completions"``).
        ``headers``: extra headers (Host, User-Agent and Content-Length are
        set here; with a plain HTTP proxy, Proxy-Authorization too; a
        caller's Host, Content-Length or Transfer-Encoding is refused).
        Raises ValueError, before anything is sent, for a method that is no
        token, a target or header that may not be written (see the module
        docstring); HTTPTimeout / HTTPConnectionError.  Cancellation: the
        connection in use is closed."""
        if self._closed:
            raise HTTPConnectionError("the HTTP client is closed")
        data, keep = self._head(method, path, headers, body)
        no_body = method == "HEAD"
        conn = self._kept()
        if conn is not None:
            try:
                return await self._exchange(conn, data, no_body, keep)
            except _StaleConnection:
                conn.close()  # the server had closed the kept connection: once more, on a fresh one
            except BaseException:
                conn.close()
                raise
        conn = await self._connect()
        try:
            return await self._exchange(conn, data, no_body, keep)
        except BaseException:
            conn.close()
            raise

    def _head(self, method: str, path: str, headers: Sequence[tuple[str, str]],
              body: bytes | None) -> tuple[bytes, bool]:
        """The request's bytes (head and body) and whether the connection may be kept after it."""
        start = self._starts.get((method, path))
        if start is None:
            start = self._start(method, path)
        parts = [start]
        keep = True
        lines = self._lines
        for header in headers:
            hit = lines.get(header)
            if hit is None:
                hit = self._line(header)
            parts.append(hit[0])
            if hit[1]:
                keep = False
        if body is not None:
            parts.append(b"Content-Length: %d\r\n\r\n" % len(body))
            parts.append(body)
        else:
            parts.append(b"\r\n")
        return b"".join(parts), keep

    def _start(self, method: str, path: str) -> bytes:
        """The request line and the client's own headers for ``method`` and ``path`` (kept)."""
        if not (self.prefix + path).startswith("/"):
            # joined to the origin in the absolute form, "@evil.example/" or ".evil.example/" would name
            # another host; in the origin form it is no target at all
            raise ValueError(f"illegal HTTP request target {self.prefix + path!r}: not opening with '/'")
        target = self.url(path) if self._absolute else self.prefix + path  # absolute form through a proxy
        start = _request_line(method, target) + self._own
        if len(self._starts) >= _START_CACHE_SIZE:
            self._starts.clear()
        self._starts[(method, path)] = start
        return start

    def _line(self, header: tuple[str, str]) -> tuple[bytes, bool]:
        """A caller's header, checked, encoded and (a value of reasonable size) kept."""
        name, value = header
        if name.lower() in _OWN_HEADERS:
            raise ValueError(f"the HTTP header {name!r} is set by the client, not by its caller")
        line = _header_line(name, value)
        closes = name.lower() == "connection" and "close" in (token.strip().lower() for token in value.split(","))
        hit = (line, closes)
        if len(value) <= _LINE_VALUE_MAX:
            if len(self._lines) >= _LINE_CACHE_SIZE:
                self._lines.clear()
            self._lines[(name, value)] = hit
        return hit

    def _kept(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.looks_closed():
                return conn
            conn.close()
        return None

    async def _exchange(self, conn: _Connection, data: bytes, no_body: bool, keep: bool) -> Response:
        reader = conn.reader = _HeadOnlyReader() if no_body else _Reader()
        conn.received = conn.head_bytes = conn.framing = 0
        conn.keep = keep
        sent = False
        # one cancel scope for the request and its head (a scope costs a few microseconds, and a
        # model call makes several): the request within timeout_s, then the whole head (1xx
        # included) within timeout_s of it — a head trickled a byte per read is no way round the
        # per-read timeout
        with trio.CancelScope(deadline=trio.current_time() + self.timeout_s) as timer:
            await self._send(conn, data)
            sent = True
            timer.deadline = trio.current_time() + self.timeout_s
            try:
                while not reader.head_done:
                    await self._receive(conn, timed=False)
            except HTTPConnectionError:
                if conn.reused and conn.received == 0:  # not a byte of an answer: the server dropped it
                    raise _StaleConnection() from None
                raise
        if timer.cancelled_caught:
            if not sent:
                raise HTTPTimeout(f"could not send within {self.timeout_s:g} s")
            raise HTTPTimeout(f"no response within {self.timeout_s:g} s (its head did not arrive whole)")
        return Response(self, conn, reader.status, reader.headers)

    async def _send(self, conn: _Connection, data: bytes) -> None:
        """Send ``data`` (the caller bounds the time).  Raises HTTPConnectionError."""
        try:
            await send_all_now(conn.stream, data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise HTTPConnectionError(str(exc) or type(exc).__name__) from exc

    async def _receive(self, conn: _Connection, *, timed: bool = True) -> None:
        """One read of the current response, fed to its parser (the head's reads bounded by
        MAX_HEAD_BYTES, the body framing's by MAX_FRAMING_BYTES; reads that bring framing but no
        body share one ``timeout_s``, from the first of them).  ``timed=False``: the caller
        bounds the time (the head's reads, under one scope)."""
        reader = conn.reader
        size = READ_CHUNK
        in_head = not reader.head_done
        if in_head:
            # reading no further than the bound makes an oversized head fail here, arrived in one
            # piece or trickled
            if conn.head_bytes >= MAX_HEAD_BYTES:
                raise HTTPConnectionError(f"the response head is larger than {MAX_HEAD_BYTES} bytes")
            size = min(READ_CHUNK, MAX_HEAD_BYTES - conn.head_bytes)
            deadline = trio.current_time() + self.timeout_s
        elif conn.framing:
            # framing (chunk sizes, extensions, trailers) trickled a byte per read is no way round the
            # per-read timeout: the body must go on within timeout_s of the first read without it
            deadline = conn.body_by
        else:
            deadline = conn.body_by = trio.current_time() + self.timeout_s
        data: bytes | bytearray = b""
        try:
            if timed:
                with trio.CancelScope(deadline=deadline) as timer:  # (fail_at would add a generator)
                    data = await conn.stream.receive_some(size)
                if timer.cancelled_caught:
                    if conn.framing:
                        raise HTTPTimeout(f"no response body within {self.timeout_s:g} s (only chunk framing "
                                          f"or trailers arrived)")
                    raise HTTPTimeout(f"no response within {self.timeout_s:g} s")
            else:
                data = await conn.stream.receive_some(size)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise HTTPConnectionError(str(exc) or type(exc).__name__) from exc
        if not data:
            conn.eof = True
            if in_head:
                raise HTTPConnectionError(
                    "the server closed the connection before the response head ended" if conn.received
                    else "the server closed the connection without answering")
            if reader.until_eof:
                reader.done = True
                return
            raise HTTPConnectionError("the server closed the connection before the response ended")
        conn.received += len(data)
        if in_head:
            conn.head_bytes += len(data)
        try:
            reader.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if reader.error is not None:
                raise HTTPConnectionError(f"malformed HTTP response: {reader.error}") from exc
            if not reader.done:
                what = "an unexpected protocol upgrade" if isinstance(exc, httptools.HttpParserUpgrade) else exc
                raise HTTPConnectionError(f"malformed HTTP response: {what}") from exc
            reader.late = True  # what followed the response did not parse: not a byte of it is ours
        if not in_head and not reader.done:
            if reader.body:
                conn.framing = 0
            else:
                conn.framing += len(data)
                if conn.framing > MAX_FRAMING_BYTES:
                    raise HTTPConnectionError(
                        f"malformed HTTP response: more than {MAX_FRAMING_BYTES} bytes of chunk framing or "
                        f"trailers without body")

    def _give_back(self, conn: _Connection) -> None:
        if self._closed or len(self._idle) >= self.max_idle:
            conn.close()
            return
        conn.reused = True
        self._idle.append(conn)

    async def _connect(self) -> _Connection:
        if self._proxy is not None and self._proxy[0] != "http":
            raise HTTPConnectionError(
                f"the proxy {self._proxy[0]}://{self._proxy[1]}:{self._proxy[2]} (from the environment) is not "
                f"supported: only http:// proxies are")
        tcp: trio.SocketStream | None = None
        try:
            with trio.fail_after(self.timeout_s):
                if self._proxy is None:
                    tcp = await trio.open_tcp_stream(self.host, self.port)  # TCP_NODELAY set by Trio
                else:
                    tcp = await trio.open_tcp_stream(self._proxy[1], self._proxy[2])
                    if self.scheme == "https":
                        await self._tunnel(tcp)
                stream: trio.abc.Stream = tcp
                if self.scheme == "https":
                    stream = trio.SSLStream(stream, self._ssl_context(), server_hostname=self.host,
                                            https_compatible=True)
                    await stream.do_handshake()
        except BaseException as exc:
            if tcp is not None:
                tcp.socket.close()
            if isinstance(exc, trio.TooSlowError):
                raise HTTPTimeout(f"could not connect to {self._authority} within {self.timeout_s:g} s") from None
            if isinstance(exc, (OSError, trio.BrokenResourceError, ssl.SSLError)):
                cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
                raise HTTPConnectionError(f"{type(cause).__name__}: {cause}") from exc
            raise
        return _Connection(stream, tcp.socket)

    async def _tunnel(self, stream: trio.SocketStream) -> None:
        """``CONNECT host:port`` through the proxy on ``stream``."""
        conn = _Connection(stream, stream.socket)
        reader = conn.reader = _HeadOnlyReader()
        await stream.send_all(self._tunnel_head)
        while not reader.head_done:
            await self._receive(conn)
        if not 200 <= reader.status < 300:
            authority = self._tunnel_head.split(b" ", 2)[1].decode("ascii")
            raise HTTPConnectionError(f"the proxy refused CONNECT {authority}: HTTP {reader.status}")
        if reader.late:
            raise HTTPConnectionError("the proxy sent data before the tunnel opened")

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()  # the system store; SSL_CERT_FILE/SSL_CERT_DIR honoured
            if os.environ.get("SSLKEYLOGFILE"):  # pragma: no cover - debugging aid, as browsers have it
                self._ssl.keylog_filename = os.environ["SSLKEYLOGFILE"]
        return self._ssl

    async def aclose(self) -> None:
        """Close every kept connection (idempotent); requests after this raise HTTPConnectionError."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _StaleConnection(Exception):
    """A kept connection that the server had closed: nothing of the request was processed."""


__all__ = ["HTTPClient", "HTTPConnectionError", "HTTPError", "HTTPTimeout", "MAX_FRAMING_BYTES", "MAX_HEAD_BYTES",
           "Response", "proxy_for"]
