"""ongridd.llm.http.HTTPClient against hand-rolled Trio servers: keep-alive
and its failure modes, body framings, limits, timeouts, TLS (trustme),
proxies from the environment (absolute form and CONNECT tunnels), IPv6."""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import pytest
import trio
import trio.testing
import trustme

from tests.conftest import ipv6_loopback

from ongridd.llm.http import (
    MAX_HEAD_BYTES,
    HTTPClient,
    HTTPConnectionError,
    HTTPTimeout,
    proxy_for,
)

# ---- a raw HTTP/1.1 server ---------------------------------------------------


@attrs.define
class Req:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which accepted connection (1, 2, ...) it arrived on


class Peer:
    """The server side of one accepted connection."""

    def __init__(self, stream: trio.abc.Stream, server: Server, number: int) -> None:
        self.stream = stream
        self.server = server
        self.number = number
        self.buf = b""

    async def request(self) -> Req | None:
        """The next request on this connection, or None at EOF."""
        while b"\r\n\r\n" not in self.buf:
            try:
                piece = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not piece:
                return None
            self.buf += piece
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            piece = await self.stream.receive_some(65536)
            assert piece, "EOF inside a request body"
            rest += piece
        body, self.buf = rest[:length], rest[length:]
        req = Req(method, target, headers, body, self.number)
        self.server.requests.append(req)
        return req

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def wait_eof(self) -> None:
        """Until the client closes (or resets) the connection."""
        try:
            while await self.stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass

    def tcp(self) -> trio.socket.SocketType:
        stream = self.stream
        while not isinstance(stream, trio.SocketStream):
            stream = stream.transport_stream  # type: ignore[attr-defined]
        return stream.socket

    def reset(self) -> None:
        """Close with a TCP RST instead of a FIN."""
        sock = self.tcp()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


@attrs.define
class Server:
    port: int = 0
    host: str = "127.0.0.1"
    accepted: int = 0
    requests: list[Req] = attrs.Factory(list)
    eofs: int = 0  # connections whose handler saw the client go away (handlers that call seen_eof)
    eof_event: trio.Event = attrs.Factory(trio.Event)

    def url(self, scheme: str = "http", prefix: str = "/v1", host: str | None = None) -> str:
        name = host or self.host
        if ":" in name:
            name = f"[{name}]"
        return f"{scheme}://{name}:{self.port}{prefix}"

    def seen_eof(self) -> None:
        self.eofs += 1
        self.eof_event.set()


Handler = Callable[[Peer], Awaitable[None]]


@contextlib.asynccontextmanager
async def serve(handler: Handler, *, host: str = "127.0.0.1",
                ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server(host=host)

    async def on_connection(stream: trio.abc.Stream) -> None:
        server.accepted += 1
        try:
            await handler(Peer(stream, server, server.accepted))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            server.seen_eof()  # the client went away (reset), or refused our certificate
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        if ssl_context is None:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, on_connection, 0, host=host))
            sock = listeners[0].socket
        else:
            listeners = await nursery.start(functools.partial(
                trio.serve_ssl_over_tcp, on_connection, 0, ssl_context, host=host, https_compatible=True))
            sock = listeners[0].transport_listener.socket
        server.port = sock.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


def ok(body: bytes = b"ok", *, status: str = "200 OK", headers: tuple[str, ...] = ()) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n" + "".join(h + "\r\n" for h in headers)
    return head.encode() + b"\r\n" + body


def chunked(*pieces: bytes, headers: tuple[str, ...] = ()) -> bytes:
    head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
    return head.encode() + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


async def answer_once(peer: Peer, answer: bytes) -> None:
    """One request, ``answer``, then wait until the client closes."""
    assert await peer.request() is not None
    await peer.send(answer)
    await peer.wait_eof()
    peer.server.seen_eof()


async def answer_all(peer: Peer) -> None:
    """Keep-alive: answer each request with its target as the body."""
    while (req := await peer.request()) is not None:
        await peer.send(ok(req.target.encode()))
    peer.server.seen_eof()


@contextlib.asynccontextmanager
async def open_client(url: str, timeout_s: float = 10, **kw) -> AsyncIterator[HTTPClient]:
    client = HTTPClient(url, timeout_s=timeout_s, **kw)
    try:
        yield client
    finally:
        await client.aclose()


async def get(client: HTTPClient, path: str = "/x", method: str = "GET", **kw) -> tuple[int, dict[str, str], bytes]:
    response = await client.request(method, path, **kw)
    try:
        return response.status, response.headers, await response.read(1 << 24)
    finally:
        await response.aclose()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy from the machine's environment leaks into these tests."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD" or name == "SSLKEYLOGFILE":
            monkeypatch.delenv(name)


# ---- keep-alive ------------------------------------------------------------------


async def test_two_requests_reuse_one_connection_and_send_the_expected_head():
    async with serve(answer_all) as server, open_client(server.url(), user_agent="ongrid-test") as client:
        first = await get(client, "/chat/completions", method="POST", body=b'{"a": 1}',
                          headers=[("Authorization", "Bearer k")])
        second = await get(client, "/models")
    assert server.accepted == 1
    assert (first[0], first[2], second[2]) == (200, b"/v1/chat/completions", b"/v1/models")
    post, plain = server.requests
    assert (post.method, post.body, post.headers["content-length"]) == ("POST", b'{"a": 1}', "8")
    assert post.headers["host"] == f"127.0.0.1:{server.port}"
    assert post.headers["user-agent"] == "ongrid-test" and post.headers["authorization"] == "Bearer k"
    assert plain.method == "GET" and "content-length" not in plain.headers
    assert client.url("/x") == f"http://127.0.0.1:{server.port}/v1/x"


async def test_empty_body_is_sent_with_content_length_zero():
    async with serve(answer_all) as server, open_client(server.url()) as client:
        await get(client, method="POST", body=b"")
    assert server.requests[0].headers["content-length"] == "0" and server.requests[0].body == b""


async def test_a_kept_connection_the_server_closed_meanwhile_is_not_used():
    closed = trio.Event()

    async def handler(peer: Peer) -> None:
        req = await peer.request()
        assert req is not None
        await peer.send(ok(b"one"))
        if peer.number == 1:
            await peer.stream.aclose()  # an idle timeout on the server
            closed.set()
            return
        await answer_all(peer)

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client))[2] == b"one"
        await closed.wait()  # on loopback the FIN is in the client's socket once close() returns
        assert (await get(client))[2] == b"one"
    assert server.accepted == 2
    assert [r.connection for r in server.requests] == [1, 2]  # nothing sent on the dead connection


@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_kept_connection_closed_after_the_next_request_arrived_is_resent_once_fresh(how):
    """The race the pre-send check cannot see: the server takes the request
    on the kept connection, then closes without a byte of answer."""

    async def handler(peer: Peer) -> None:
        if peer.number == 1:
            assert await peer.request() is not None
            await peer.send(ok(b"first"))
            assert await peer.request() is not None
            if how == "reset":
                peer.reset()
            return
        await answer_all(peer)

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client, "/a"))[2] == b"first"
        assert (await get(client, "/b"))[2] == b"/v1/b"
    assert server.accepted == 2
    assert [(r.target, r.connection) for r in server.requests] == [("/v1/a", 1), ("/v1/b", 1), ("/v1/b", 2)]


@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_kept_connection_that_answered_partly_is_not_resent(how):
    async def handler(peer: Peer) -> None:
        assert await peer.request() is not None
        await peer.send(ok(b"first"))
        assert await peer.request() is not None
        await peer.send(b"HTTP/1.1 200 OK\r\n")  # the server did process it: resending would run it twice
        if how == "reset":
            await trio.testing.wait_all_tasks_blocked()  # the client has read them before the RST
            peer.reset()

    async with serve(handler) as server, open_client(server.url()) as client:
        await get(client)
        with pytest.raises(HTTPConnectionError):
            await get(client)
    assert server.accepted == 1 and len(server.requests) == 2


@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_fresh_connection_closed_without_an_answer_is_an_error_not_a_resend(how):
    async def handler(peer: Peer) -> None:
        assert await peer.request() is not None
        if how == "reset":
            peer.reset()

    async with serve(handler) as server, open_client(server.url()) as client:
        with pytest.raises(HTTPConnectionError) as info:
            await get(client)
    assert server.accepted == 1 and len(server.requests) == 1
    if how == "eof":
        assert "closed the connection" in str(info.value)


async def test_only_one_resend_after_a_stale_connection():
    """Every connection takes the request and closes: one resend on a fresh
    connection, and that one's failure is the caller's error."""

    async def handler(peer: Peer) -> None:
        if peer.number == 1:
            assert await peer.request() is not None
            await peer.send(ok(b"first"))
        await peer.request()

    async with serve(handler) as server, open_client(server.url()) as client:
        await get(client)
        with pytest.raises(HTTPConnectionError):
            await get(client)
    assert server.accepted == 2 and len(server.requests) == 3


@pytest.mark.parametrize("close", ["connection: close", "http/1.0"])
async def test_a_connection_close_response_is_not_reused(close):
    async def handler(peer: Peer) -> None:
        assert await peer.request() is not None
        if close == "http/1.0":
            await peer.send(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok")
        else:
            await peer.send(ok(headers=("Connection: close",)))
        await peer.wait_eof()
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client))[2] == b"ok"
        assert (await get(client))[2] == b"ok"
        with trio.fail_after(10):
            while server.eofs < 2:
                await trio.sleep(0.01)
    assert server.accepted == 2


async def test_max_idle_bounds_the_kept_connections_and_concurrent_requests_use_their_own():
    both_arrived = trio.Event()

    async def handler(peer: Peer) -> None:
        while (req := await peer.request()) is not None:
            if len(peer.server.requests) == 2:
                both_arrived.set()
            await both_arrived.wait()
            await peer.send(ok(req.target.encode()))
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url(), max_idle=1) as client:
        results: list[bytes] = []

        async def one(path: str) -> None:
            results.append((await get(client, path))[2])

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, "/a")
                nursery.start_soon(one, "/b")
            await server.eof_event.wait()  # the second connection given back found no room and was closed
        assert sorted(results) == [b"/v1/a", b"/v1/b"]
        assert server.accepted == 2 and server.eofs == 1
        await get(client, "/c")
        assert server.accepted == 2  # the kept one served it


async def test_aclose_closes_kept_connections_and_later_requests_fail():
    async with serve(answer_all) as server:
        client = HTTPClient(server.url(), timeout_s=10)
        await get(client)
        await client.aclose()
        await client.aclose()
        with trio.fail_after(10):
            await server.eof_event.wait()
        with pytest.raises(HTTPConnectionError, match="closed"):
            await get(client)


async def test_keep_alive_works_with_a_descriptor_number_above_1024():
    """The kept connection's liveness check must not depend on select()'s FD_SETSIZE."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard}")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    filler: list[int] = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < 1100:
            filler.append(fd)
        os.close(fd)  # the connections get numbers above 1024 (freed ones aside, none below are free)
        async with serve(answer_all) as server, open_client(server.url()) as client:
            for path in ("/a", "/b", "/c"):
                await get(client, path)
        assert server.accepted == 1
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---- body framings and reading --------------------------------------------------


async def test_content_length_chunked_and_until_close_bodies():
    big = bytes(range(256)) * 1024  # 256 KiB: several reads

    async def handler(peer: Peer) -> None:
        while (req := await peer.request()) is not None:
            if req.target.endswith("/length"):
                await peer.send(ok(big))
            elif req.target.endswith("/chunked"):
                await peer.send(chunked(b"hello ", b"world" * 3000, b"!"))
            elif req.target.endswith("/empty"):
                await peer.send(b"HTTP/1.1 204 No Content\r\n\r\n")
            else:
                await peer.send(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + big)
                return

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client, "/length"))[2] == big
        response = await client.request("GET", "/chunked")
        pieces = [piece async for piece in response.aiter_bytes()]
        await response.aclose()
        assert b"".join(pieces) == b"hello " + b"world" * 3000 + b"!" and all(pieces)
        status, _, body = await get(client, "/empty")
        assert (status, body) == (204, b"")
        assert (await get(client, "/until-close"))[2] == big
    assert server.accepted == 1


async def test_response_headers_are_lower_cased_and_an_informational_response_is_skipped():
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 100 Continue\r\n\r\n"
                        + ok(b"{}", status="429 Too Many Requests", headers=("Retry-After: 3", "X-Thing: a")))
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        status, headers, body = await get(client)
    assert status == 429 and body == b"{}"
    assert headers["retry-after"] == "3" and headers["x-thing"] == "a" and headers["content-length"] == "2"


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_read_limit_cuts_the_body_and_closes_the_connection(framing):
    body = b"x" * 200_000

    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(ok(body) if framing == "length" else chunked(body[:100_000], body[100_000:]))
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        response = await client.request("GET", "/x")
        assert await response.read(10) == b"x" * 10
        await response.aclose()
        with trio.fail_after(10):
            await server.eof_event.wait()
        assert (await get(client))[2] == body  # a fresh connection
        assert server.accepted == 2


async def test_read_of_a_body_within_the_limit_keeps_the_connection():
    async with serve(answer_all) as server, open_client(server.url()) as client:
        response = await client.request("GET", "/x")
        assert await response.read(1000) == b"/v1/x"
        assert await response.read(1000) == b""  # the body was read to its end
        await response.aclose()
        await response.aclose()  # idempotent
        await get(client)
    assert server.accepted == 1


async def test_aclose_mid_body_closes_the_connection():
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await peer.wait_eof()  # never ends the body
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url(), timeout_s=60) as client:
        response = await client.request("GET", "/stream")
        async with contextlib.aclosing(response.aiter_bytes()) as body:
            async for piece in body:
                assert piece == b"first"
                break
        await response.aclose()
        with trio.fail_after(10):
            await server.eof_event.wait()


async def test_cancelled_request_closes_its_connection():
    arrived = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.request()
        arrived.set()
        await peer.wait_eof()
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url(), timeout_s=60) as client:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(get, client)
                await arrived.wait()
                nursery.cancel_scope.cancel()
            await server.eof_event.wait()


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_body_cut_off_by_the_server_is_an_error(framing):
    async def handler(peer: Peer) -> None:
        await peer.request()
        if framing == "length":
            await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        else:
            await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nhalf\r\n")

    async with serve(handler) as server, open_client(server.url()) as client:
        response = await client.request("GET", "/x")
        with pytest.raises(HTTPConnectionError, match="closed the connection before the response ended"):
            await response.read(100)
        await response.aclose()


# ---- timeouts --------------------------------------------------------------------


async def test_read_timeout_waiting_for_the_head():
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.wait_eof()  # never answers
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url(), timeout_s=0.2) as client:
        with trio.fail_after(10):
            with pytest.raises(HTTPTimeout, match="no response within 0.2 s"):
                await get(client)
            await server.eof_event.wait()  # the timed-out connection was closed


async def test_read_timeout_inside_the_body():
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nsome")
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url(), timeout_s=0.2) as client:
        response = await client.request("GET", "/x")
        with trio.fail_after(10):
            with pytest.raises(HTTPTimeout):
                await response.read(1000)
        await response.aclose()


async def test_connect_timeout_when_the_tls_handshake_never_answers():
    """The connection phase (TCP, tunnel, TLS) has the timeout too: a server
    that accepts TCP and never speaks TLS."""

    async def handler(peer: Peer) -> None:
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url("https"), timeout_s=0.2) as client:
        with trio.fail_after(10):
            with pytest.raises(HTTPTimeout, match="could not connect"):
                await get(client)


async def test_connection_refused_is_a_connection_error():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    async with open_client(f"http://127.0.0.1:{port}/v1") as client:
        with pytest.raises(HTTPConnectionError) as info:
            await get(client)
    assert isinstance(info.value.__cause__, OSError)


# ---- malformed responses ------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    b"SPAM\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
])
async def test_malformed_responses_are_connection_errors(answer):
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(answer)
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="malformed"):
            await get(client)


@pytest.mark.parametrize("size", [MAX_HEAD_BYTES + 100, 3 * MAX_HEAD_BYTES])
async def test_a_response_head_over_the_bound_is_refused(size):
    async def handler(peer: Peer) -> None:
        await peer.request()
        head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"
        while len(head) < size:
            head += b"x-filler: " + b"f" * 1000 + b"\r\n"
        await peer.send(head + b"\r\nok")  # the whole head at once: the bound is not the read size
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="head"):
            await get(client)


async def test_a_response_head_just_under_the_bound_is_accepted():
    async def handler(peer: Peer) -> None:
        await peer.request()
        head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"
        while len(head) < MAX_HEAD_BYTES - 2000:
            head += b"x-filler: " + b"f" * 1000 + b"\r\n"
        await peer.send(head + b"\r\nok")
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        status, headers, body = await get(client)
    assert (status, body) == (200, b"ok") and headers["x-filler"] == "f" * 1000


# ---- TLS ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def server_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1", "::1").configure_cert(context)
    return context


@pytest.fixture
def trust(ca: trustme.CA, tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Point SSL_CERT_FILE at ``ca`` (or at another CA: ``trust(None)``)."""
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    monkeypatch.setenv("SSL_CERT_DIR", str(empty))

    def point(authority: trustme.CA | None) -> None:
        path = tmp_path / "ca.pem"
        (authority or trustme.CA()).cert_pem.write_to_path(str(path))
        monkeypatch.setenv("SSL_CERT_FILE", str(path))

    return point


async def test_https_verified_against_ssl_cert_file_with_keep_alive(ca, server_tls, trust):
    async with serve(answer_all, ssl_context=server_tls) as server:
        client = HTTPClient(server.url("https"), timeout_s=10)  # built before the variable is set: the
        trust(ca)  # TLS context is made at the first connection
        try:
            assert (await get(client, "/a"))[2] == b"/v1/a"
            assert (await get(client, "/b"))[2] == b"/v1/b"
        finally:
            await client.aclose()
        with trio.fail_after(10):
            await server.eof_event.wait()
    assert server.accepted == 1
    assert server.requests[0].headers["host"] == f"127.0.0.1:{server.port}"


async def test_https_with_the_name_in_the_certificate(ca, server_tls, trust):
    trust(ca)
    async with serve(answer_all, ssl_context=server_tls) as server, \
            open_client(server.url("https", host="localhost")) as client:
        assert (await get(client))[2] == b"/v1/x"


def test_urls_and_the_default_port_left_out_of_the_authority():
    client = HTTPClient("https://api.example.com/v1/", timeout_s=1)
    assert client.url("/models") == "https://api.example.com/v1/models"
    assert HTTPClient("http://example.com:80", timeout_s=1).url("/x") == "http://example.com/x"
    assert HTTPClient("http://Example.COM:8080/", timeout_s=1).url("/x") == "http://example.com:8080/x"
    with pytest.raises(ValueError):
        HTTPClient("ftp://example.com/", timeout_s=1)
    with pytest.raises(ValueError):
        HTTPClient("http:///nohost", timeout_s=1)


@pytest.mark.parametrize("why", ["unknown CA", "wrong name"])
async def test_https_verification_failure_is_a_connection_error(ca, server_tls, trust, why):
    trust(None if why == "unknown CA" else ca)
    context = server_tls
    if why == "wrong name":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("other.example").configure_cert(context)
    async with serve(answer_all, ssl_context=context) as server, open_client(server.url("https")) as client:
        with pytest.raises(HTTPConnectionError, match="CERTIFICATE_VERIFY_FAILED") as info:
            await get(client)
    assert isinstance(info.value.__cause__, trio.BrokenResourceError)
    assert not server.requests


# ---- proxies -----------------------------------------------------------------------


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_http_through_a_proxy_in_absolute_form_with_proxy_authorization(monkeypatch):
    async with serve(answer_all) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://us%40er:p%3Ass@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "localhost,.internal")
        async with open_client("http://api.example.invalid:8000/v1") as client:
            assert (await get(client, "/chat"))[2] == b"http://api.example.invalid:8000/v1/chat"
            await get(client, "/models")
    first, second = proxy.requests
    assert first.target == "http://api.example.invalid:8000/v1/chat"
    assert first.headers["host"] == "api.example.invalid:8000"
    assert first.headers["proxy-authorization"] == basic("us@er", "p:ss") == second.headers["proxy-authorization"]
    assert proxy.accepted == 1  # kept alive to the proxy


async def test_lowercase_and_all_proxy_variables_are_read(monkeypatch):
    async with serve(answer_all) as proxy:
        monkeypatch.setenv("all_proxy", f"127.0.0.1:{proxy.port}")  # no scheme: http
        async with open_client("http://api.example.invalid/v1") as client:
            await get(client)
    assert proxy.requests[0].target == "http://api.example.invalid/v1/x"
    assert "proxy-authorization" not in proxy.requests[0].headers


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*", "example.invalid, 127.0.0.1 "])
async def test_no_proxy_goes_direct(monkeypatch, no_proxy):
    async with serve(answer_all) as proxy, serve(answer_all) as direct:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", no_proxy)
        assert proxy_for(direct.url()) is None
        async with open_client(direct.url()) as client:
            assert (await get(client))[2] == b"/v1/x"
    assert proxy.accepted == 0 and direct.requests[0].target == "/v1/x"


def test_proxy_for_picks_the_scheme_and_the_default_port(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://secure-proxy.example")
    monkeypatch.setenv("HTTP_PROXY", "http://plain-proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    assert proxy_for("https://api.example.com/v1") == "http://secure-proxy.example"
    assert proxy_for("http://api.example.com/v1") == "http://plain-proxy.example:3128"
    assert proxy_for("http://svc.internal.example/v1") is None
    # a proxy URL without a port means the scheme's default, as urllib, requests and httpx read it
    assert HTTPClient("https://api.example.com/v1", timeout_s=1)._proxy == ("http", "secure-proxy.example", 80, None)


async def test_an_unsupported_proxy_scheme_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    async with open_client("https://api.example.invalid/v1") as client:
        with pytest.raises(HTTPConnectionError, match="socks5"):
            await get(client)


@contextlib.asynccontextmanager
async def connect_proxy(status: str = "200 Connection established") -> AsyncIterator[Server]:
    """A proxy that answers CONNECT (``status``) and then pipes bytes both ways."""

    async def pipe(src: trio.abc.Stream, dst: trio.abc.Stream, done: trio.CancelScope) -> None:
        try:
            while data := await src.receive_some(65536):
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        done.cancel()

    async def handler(peer: Peer) -> None:
        req = await peer.request()
        assert req is not None and req.method == "CONNECT"
        if not status.startswith("2"):
            await peer.send(f"HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n".encode())
            await peer.wait_eof()
            return
        host, _, port = req.target.rpartition(":")
        upstream = await trio.open_tcp_stream(host.strip("[]"), int(port))
        await peer.send(f"HTTP/1.1 {status}\r\n\r\n".encode())
        assert peer.buf == b""
        async with upstream, trio.open_nursery() as nursery:
            nursery.start_soon(pipe, peer.stream, upstream, nursery.cancel_scope)
            nursery.start_soon(pipe, upstream, peer.stream, nursery.cancel_scope)

    async with serve(handler) as proxy:
        yield proxy


async def test_https_through_a_connect_tunnel(ca, server_tls, trust, monkeypatch):
    trust(ca)
    async with serve(answer_all, ssl_context=server_tls) as origin, connect_proxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://me:secret@127.0.0.1:{proxy.port}")
        async with open_client(origin.url("https")) as client:
            assert (await get(client, "/a"))[2] == b"/v1/a"
            assert (await get(client, "/b"))[2] == b"/v1/b"
    (connect,) = proxy.requests
    assert connect.target == connect.headers["host"] == f"127.0.0.1:{origin.port}"
    assert connect.headers["proxy-authorization"] == basic("me", "secret")
    assert proxy.accepted == origin.accepted == 1
    assert [r.target for r in origin.requests] == ["/v1/a", "/v1/b"]  # origin form inside the tunnel
    assert all("proxy-authorization" not in r.headers for r in origin.requests)


async def test_a_proxy_refusing_connect_is_a_connection_error_naming_it(monkeypatch):
    async with connect_proxy("407 Proxy Authentication Required") as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        async with open_client("https://api.example.invalid:8443/v1") as client:
            with pytest.raises(HTTPConnectionError, match="refused CONNECT api.example.invalid:8443: HTTP 407"):
                await get(client)


async def test_a_proxy_silent_after_connect_is_a_timeout(monkeypatch):
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.wait_eof()

    async with serve(handler) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        async with open_client("https://api.example.invalid/v1", timeout_s=0.2) as client:
            with trio.fail_after(10), pytest.raises(HTTPTimeout):
                await get(client)


# ---- IPv6 ---------------------------------------------------------------------------


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
async def test_ipv6_host_header_and_url():
    async with serve(answer_all, host="::1") as server, open_client(server.url()) as client:
        await get(client)
        assert client.url("/x") == f"http://[::1]:{server.port}/v1/x"
    assert server.requests[0].headers["host"] == f"[::1]:{server.port}"


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
async def test_ipv6_tunnel_authority(monkeypatch):
    async with connect_proxy("403 Forbidden") as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        async with open_client("https://[::1]:8443/v1") as client:
            with pytest.raises(HTTPConnectionError, match=r"CONNECT \[::1\]:8443: HTTP 403"):
                await get(client)
    assert proxy.requests[0].target == proxy.requests[0].headers["host"] == "[::1]:8443"


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
async def test_https_to_an_ipv6_address_checks_the_address_in_the_certificate(ca, server_tls, trust):
    trust(ca)
    async with serve(answer_all, host="::1", ssl_context=server_tls) as server, \
            open_client(server.url("https")) as client:
        assert (await get(client))[2] == b"/v1/x"
    assert server.requests[0].headers["host"] == f"[::1]:{server.port}"
