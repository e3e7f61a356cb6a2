"""A small HTTP/1.1 client for model APIs: keep-alive connections on Trio,
``h11`` for the protocol, the standard library's ``ssl`` for TLS.

Why not the SDK's HTTP stack: a model call through it cost about 1.5 ms of
CPU (request building, auth and retry wrappers, a connection pool whose
request-to-connection matching grows with its size, per-chunk SSE objects),
a third of the daemon's CPU per turn under load.  This client does only
what a model call needs: one request, its response streamed or read whole,
the connection kept for the next call.

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
  read, and the whole response head (1xx included): a peer silent that long,
  or trickling a head, raises :class:`HTTPTimeout`.
* A kept connection the server has closed meanwhile is noticed before the
  next request is sent on it (its socket is readable: the server's EOF) and
  dropped.  When the server closes or resets it just after the request was
  sent, before a byte of the answer, the request is sent once more, on a
  fresh connection (a server closing an idle connection did not process
  it).  A fresh connection is never resent on.

Errors: :class:`HTTPTimeout`, :class:`HTTPConnectionError` (refused, reset,
TLS failure, a malformed or cut-off response — ``__cause__`` is the
underlying exception).  An HTTP error status is not an exception here: the
caller reads ``Response.status``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import select
import ssl
import urllib.request
from collections.abc import AsyncGenerator, Sequence
from urllib.parse import unquote, urlsplit

import h11
import trio

#: a read asks for at most this many bytes
READ_CHUNK = 65536
#: the largest response head (status line and headers, informational heads included) accepted, bytes
MAX_HEAD_BYTES = 64 * 1024


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


class _Connection:
    """One TCP (or TLS) connection and its h11 state; ``sock`` is the TCP socket under ``stream``.
    ``received``: bytes read for the current response; ``head_bytes``: of them, those read while
    its head was incomplete (bounded by MAX_HEAD_BYTES); ``eof``: the server's EOF was read."""

    __slots__ = ("stream", "sock", "h11", "reused", "received", "head_bytes", "eof")

    def __init__(self, stream: trio.abc.Stream, sock: trio.socket.SocketType) -> None:
        self.stream = stream
        self.sock = sock
        self.h11 = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.reused = False
        self.received = 0
        self.head_bytes = 0
        self.eof = False

    def close(self) -> None:
        """Close at once (no TLS close_notify: the connection is dropped, not ended politely)."""
        self.sock.close()

    def looks_closed(self) -> bool:
        """A kept connection with something to read (the server's EOF, most likely) is not reusable.
        ``poll``, not ``select``: a descriptor numbered past FD_SETSIZE (1024) is fine."""
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
        """The body's bytes as they arrive.  Raises HTTPTimeout /
        HTTPConnectionError.  Cancellation: the wait for the next bytes is
        cancelled; :meth:`aclose` then closes the connection."""
        conn = self._conn
        if conn is None or self._done:
            return
        while True:
            event = await self._client._next_event(conn)
            if isinstance(event, h11.Data):
                if event.data:
                    yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._done = True
                return
            else:  # pragma: no cover - h11 sends only Data then EndOfMessage here
                raise HTTPConnectionError(f"unexpected HTTP event {type(event).__name__}")

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
        if (self._done and conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE
                and not conn.h11.trailing_data[0]):
            try:
                conn.h11.start_next_cycle()
            except h11.LocalProtocolError:
                conn.close()
                return
            self._client._give_back(conn)
            return
        conn.close()


class HTTPClient:
    """Keep-alive HTTP/1.1 connections to one origin (see the module docstring).

    ``max_idle``: connections kept open between requests (more may be open
    while requests run; the caller bounds those).  One client serves
    concurrent requests; each request uses its own connection.
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

    def url(self, path: str) -> str:
        """The full URL of ``path`` (relative to the base URL's prefix)."""
        return f"{self.scheme}://{self._authority}{self.prefix}{path}"

    async def request(self, method: str, path: str, *, headers: Sequence[tuple[str, str]] = (),
                      body: bytes | None = None) -> Response:
        """Send one request and wait for the response head.  ``path`` is
        relative to the base URL's prefix (``"/chat/completions"``).
        ``headers``: extra headers (Host, User-Agent and Content-Length are
        set here; with a plain HTTP proxy, Proxy-Authorization too).
        Raises HTTPTimeout / HTTPConnectionError.  Cancellation: the
        connection in use is closed."""
        if self._closed:
            raise HTTPConnectionError("the HTTP client is closed")
        target = self.prefix + path
        if self._proxy is not None and self.scheme == "http":
            target = self.url(path)  # absolute form through a plain HTTP proxy
        head = [("Host", self._authority), ("User-Agent", self.user_agent), *headers]
        if body is not None:
            head.append(("Content-Length", str(len(body))))
        if self._proxy is not None and self.scheme == "http" and self._proxy[3]:
            head.append(("Proxy-Authorization", self._proxy[3]))
        wire_request = h11.Request(method=method, target=target, headers=head)
        conn = self._kept()
        if conn is not None:
            try:
                return await self._exchange(conn, wire_request, body)
            except _StaleConnection:
                conn.close()  # the server had closed the kept connection: once more, on a fresh one
            except BaseException:
                conn.close()
                raise
        conn = await self._connect()
        try:
            return await self._exchange(conn, wire_request, body)
        except BaseException:
            conn.close()
            raise

    def _kept(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.looks_closed():
                return conn
            conn.close()
        return None

    async def _exchange(self, conn: _Connection, wire_request: h11.Request, body: bytes | None) -> Response:
        data = conn.h11.send(wire_request) or b""
        if body:
            data += conn.h11.send(h11.Data(data=body)) or b""
        data += conn.h11.send(h11.EndOfMessage()) or b""
        conn.received = conn.head_bytes = 0
        await self._send(conn, data)
        # the whole head (1xx included) within timeout_s of the request: a head trickled a byte
        # per read is no way round the per-read timeout
        with trio.move_on_after(self.timeout_s) as head_time:
            try:
                event = await self._next_event(conn)
            except HTTPConnectionError:
                if conn.reused and conn.received == 0:  # not a byte of an answer: the server dropped it
                    raise _StaleConnection() from None
                raise
            while isinstance(event, h11.InformationalResponse):
                event = await self._next_event(conn)
        if head_time.cancelled_caught:
            raise HTTPTimeout(f"no response within {self.timeout_s:g} s (its head did not arrive whole)")
        if not isinstance(event, h11.Response):  # pragma: no cover - h11 guarantees a Response next
            raise HTTPConnectionError(f"unexpected HTTP event {type(event).__name__}")
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in event.headers}
        return Response(self, conn, event.status_code, headers)

    async def _send(self, conn: _Connection, data: bytes) -> None:
        try:
            with trio.fail_after(self.timeout_s):
                await conn.stream.send_all(data)
        except trio.TooSlowError:
            raise HTTPTimeout(f"could not send within {self.timeout_s:g} s") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise HTTPConnectionError(str(exc) or type(exc).__name__) from exc

    async def _next_event(self, conn: _Connection) -> object:
        """The next h11 event of the response, reading as needed."""
        while True:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError as exc:
                what = "the server closed the connection before the response ended" if conn.eof else \
                    "malformed HTTP response"
                raise HTTPConnectionError(f"{what}: {exc}") from exc
            if event is not h11.NEED_DATA:
                if event is h11.PAUSED:  # pragma: no cover - only after a complete response
                    raise HTTPConnectionError("HTTP connection paused")
                if isinstance(event, h11.ConnectionClosed):
                    raise HTTPConnectionError("the server closed the connection before the response ended")
                return event
            size = READ_CHUNK
            in_head = conn.h11.their_state is h11.SEND_RESPONSE
            if in_head:
                # h11 bounds only an incomplete head; reading no further than the bound makes a
                # complete but oversized one (arrived in one piece) fail here too
                if conn.head_bytes >= MAX_HEAD_BYTES:
                    raise HTTPConnectionError(f"the response head is larger than {MAX_HEAD_BYTES} bytes")
                size = min(READ_CHUNK, MAX_HEAD_BYTES - conn.head_bytes)
            try:
                with trio.fail_after(self.timeout_s):
                    data = await conn.stream.receive_some(size)
            except trio.TooSlowError:
                raise HTTPTimeout(f"no response within {self.timeout_s:g} s") from None
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise HTTPConnectionError(str(exc) or type(exc).__name__) from exc
            if in_head:
                if not data:
                    raise HTTPConnectionError(
                        "the server closed the connection before the response head ended" if conn.received
                        else "the server closed the connection without answering")
                conn.head_bytes += len(data)
            conn.received += len(data)
            conn.eof = not data
            conn.h11.receive_data(bytes(data))

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
        assert self._proxy is not None
        authority = f"{self.host}:{self.port}" if ":" not in self.host else f"[{self.host}]:{self.port}"
        head = [("Host", authority)] + ([("Proxy-Authorization", self._proxy[3])] if self._proxy[3] else [])
        conn = _Connection(stream, stream.socket)
        data = conn.h11.send(h11.Request(method="CONNECT", target=authority, headers=head)) or b""
        data += conn.h11.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)
        event = await self._next_event(conn)
        if not isinstance(event, h11.Response) or not 200 <= event.status_code < 300:
            status = getattr(event, "status_code", "?")
            raise HTTPConnectionError(f"the proxy refused CONNECT {authority}: HTTP {status}")
        leftover, _ = conn.h11.trailing_data
        if leftover:
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


__all__ = ["HTTPClient", "HTTPConnectionError", "HTTPError", "HTTPTimeout", "Response", "proxy_for"]
