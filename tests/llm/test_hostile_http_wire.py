"""ongridd.llm.http against a hostile or broken model server or proxy, on
real Trio sockets: whatever arrives, a request ends in a response, an
HTTPConnectionError or an HTTPTimeout within its bounds (time and memory),
no body of one response joins another, no byte nobody asked for answers a
later request (over TLS too), and no header or target from the caller can
add a line or move the request to another host."""

from __future__ import annotations

import contextlib
import functools
import ssl
import tracemalloc
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
import trustme
from tests.llm.test_http_client import (  # noqa: F401  (clean_env: an autouse fixture, used here too)
    Peer,
    Server,
    answer_all,
    answer_once,
    chunked,
    clean_env,
    get,
    ok,
    open_client,
    serve,
)

from ongridd.llm.http import (
    MAX_FRAMING_BYTES,
    MAX_HEAD_BYTES,
    HTTPClient,
    HTTPConnectionError,
    HTTPError,
    HTTPTimeout,
)


async def body_size_and_peak_memory(client: HTTPClient) -> tuple[int, int]:
    """GET ``/x`` and read its body: (bytes read, peak bytes traced meanwhile)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        response = await client.request("GET", "/x")
        size = 0
        with trio.fail_after(60):
            async for data in response.aiter_bytes():
                size += len(data)
        await response.aclose()
        return size, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def quietly(send, data: bytes | memoryview) -> bool:
    """``send(data)``; False once the client has gone."""
    try:
        await send(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return False
    return True


# ---- response heads -----------------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    # a body announced by a status below 100, or by a 1xx that llhttp reads a body for, must never be
    # taken as the start of the final response's body
    b"HTTP/1.1 000 Zero\r\ncontent-length: 5\r\n\r\nEVIL!" + ok(),
    b"HTTP/1.1 099 Low\r\ncontent-length: 5\r\n\r\nEVIL!" + ok(),
    b"HTTP/1.1 042 Low\r\n\r\nEVIL!" + ok(),  # no framing: a body up to the server's EOF
    b"HTTP/1.1 150 Odd\r\ncontent-length: 5\r\n\r\nEVIL!" + ok(),
    b"HTTP/1.1 199 Odd\r\ntransfer-encoding: chunked\r\n\r\n5\r\nEVIL!\r\n0\r\n\r\n" + ok(),
    b"HTTP/1.1 103 Early Hints\r\ncontent-length: 5\r\n\r\nEVIL!" + ok(),
    b"HTTP/1.1 104 Odd\r\ncontent-length: 5\r\n\r\nEVIL!" + chunked(b"ok"),
])
async def test_a_body_in_an_informational_or_sub_100_response_never_joins_the_final_body(answer):
    async with serve(lambda peer: answer_once(peer, answer)) as server, open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="malformed HTTP response"):
            await get(client)


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nx: a\x00b\r\ncontent-length: 2\r\n\r\nok",  # NUL in a value
    b"HTTP/1.1 200 OK\r\nx: a\rb\r\ncontent-length: 2\r\n\r\nok",  # bare CR in a value
    b"HTTP/1.1 200 OK\r\nx: a\x01b\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nx: a\x7fb\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nx\x01: ab\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nx : ab\r\ncontent-length: 2\r\n\r\nok",  # blank before the colon
    b"HTTP/1.1 200 OK\r\n: ab\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\rx: 1\r\n\r\nok",  # a bare CR ending a line
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\tfolded\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nok",  # equal duplicates too
    b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: -2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2,2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 0x2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 18446744073709551616\r\n\r\nok",  # 2**64
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: \r\n\r\nok",
    b"HTTP/1.1 0200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1  200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 2OO OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.2 200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/2.0 200 OK\r\ncontent-length: 2\r\n\r\nok",  # HTTP/2 is not text
    b"HTTP/0.9 200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"http/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\nok\n0\n\n",  # bare LF in the framing
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2 \r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1" + b"0" * 16 + b"\r\nok\r\n",  # 16**16: overflow
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\ncontent-length: 5\r\n\r\n",
])
async def test_a_malformed_head_or_framing_is_a_connection_error(answer):
    async with serve(lambda peer: answer_once(peer, answer)) as server, open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="malformed HTTP response"):
            await get(client)
        with trio.fail_after(10):
            await server.eof_event.wait()  # and the connection is closed


@pytest.mark.parametrize(("answer", "status", "body"), [
    (b"HTTP/1.1 200\r\ncontent-length: 2\r\n\r\nok", 200, b"ok"),  # no reason phrase
    (b"HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\nok", 200, b"ok"),
    (b"HTTP/1.1 999 Whatever\r\ncontent-length: 2\r\n\r\nok", 999, b"ok"),
    (b"HTTP/1.1 200 O\xffK\r\ncontent-length: 2\r\n\r\nok", 200, b"ok"),  # the reason is not read
    (b"HTTP/1.1 200 OK\r\nContent-Length:   2  \r\n\r\nok", 200, b"ok"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, b"ok"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0002;a=b;c=\"d\"\r\nok\r\n0\r\nx-t: 1\r\n\r\n", 200,
     b"ok"),
    (b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
     b"HTTP/1.1 100 Continue\r\ncontent-length: 0\r\n\r\n" + ok(), 200, b"ok"),
])
async def test_odd_but_legal_responses_are_read(answer, status, body):
    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(answer)

    async with serve(handler) as server, open_client(server.url()) as client:
        for _ in range(2):
            got = await get(client)
            assert (got[0], got[2]) == (status, body)
            assert "link" not in got[1]  # an informational head's headers are not the final head's
    assert server.accepted == 1


async def test_a_flood_of_informational_heads_or_of_tiny_headers_is_refused_at_the_head_bound():
    for flood in (b"HTTP/1.1 102 Processing\r\n\r\n" * 40_000, b"HTTP/1.1 200 OK\r\n" + b"a:b\r\n" * 200_000):
        async def handler(peer: Peer, flood: bytes = flood) -> None:
            await peer.request()
            await quietly(peer.send, flood + ok())

        async with serve(handler) as server, open_client(server.url()) as client:
            started = trio.current_time()
            with trio.fail_after(10), pytest.raises(HTTPConnectionError, match=f"larger than {MAX_HEAD_BYTES}"):
                await get(client)
            assert trio.current_time() - started < 5


@pytest.mark.parametrize("what", ["a byte at a time", "informational heads without end", "one endless header"])
async def test_a_trickled_head_is_a_timeout_within_timeout_s(what):
    async def handler(peer: Peer) -> None:
        await peer.request()
        if what == "a byte at a time":
            pieces = [bytes([b]) for b in ok()]
        elif what == "informational heads without end":
            pieces = [b"HTTP/1.1 102 Processing\r\n\r\n"] * 1000
        else:
            pieces = [b"HTTP/1.1 200 OK\r\nx-long: "] + [b"v"] * 10_000
        for piece in pieces:
            if not await quietly(peer.send, piece):
                return
            await trio.sleep(0.02)

    async with serve(handler) as server, open_client(server.url(), timeout_s=0.5) as client:
        started = trio.current_time()
        with trio.fail_after(10), pytest.raises(HTTPTimeout, match="within 0.5 s"):
            await get(client)
        assert trio.current_time() - started < 3


@pytest.mark.parametrize("where", ["mid-head", "mid-chunk", "mid-length-body", "mid-chunk-size"])
@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_connection_cut_anywhere_is_a_connection_error(where, how):
    partial = {
        "mid-head": b"HTTP/1.1 200 OK\r\ncontent-le",
        "mid-chunk": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\na\r\nhalf",
        "mid-length-body": b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf",
        "mid-chunk-size": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nhalf\r\n1",
    }[where]

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(partial)
        await trio.testing.wait_all_tasks_blocked(0.01)
        if how == "reset":
            peer.reset()

    async with serve(handler) as server, open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError):
            await get(client)


# ---- bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["chunk extension", "trailer", "chunk size of zeros", "trailers after trailers"])
async def test_chunk_framing_trickled_never_keeps_the_body_past_timeout_s(where):
    """Each read brings a byte within timeout_s, but never a byte of body: the
    per-read timeout alone would let this go on for MAX_FRAMING_BYTES reads."""
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        start, byte = {"chunk extension": (b"5;ext=", b"e"), "trailer": (b"0\r\nx-trailer: ", b"t"),
                       "chunk size of zeros": (b"", b"0"), "trailers after trailers": (b"0\r\n", b"a:b\r\n")}[where]
        if not await quietly(peer.send, start):
            return
        for _ in range(MAX_FRAMING_BYTES):
            await trio.sleep(0.05)
            if not await quietly(peer.send, byte):
                return

    async with serve(handler) as server, open_client(server.url(), timeout_s=0.5) as client:
        response = await client.request("GET", "/x")
        pieces = []
        started = trio.current_time()
        with trio.fail_after(10), pytest.raises(HTTPTimeout, match="within 0.5 s"):
            async for piece in response.aiter_bytes():
                pieces.append(piece)
        await response.aclose()
        assert trio.current_time() - started < 3
    assert pieces == [b"first"]


async def test_a_slow_but_steady_stream_is_read_whole():
    """The framing bound is no bound on a body that keeps coming: a piece at
    least every timeout_s, chunk sizes and data split over reads, goes on past
    timeout_s as long as it likes."""
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(12):
            await peer.send(b"1")
            await trio.sleep(0.05)
            await peer.send(b"\r\n%d" % (i % 10))
            await trio.sleep(0.05)
            await peer.send(b"\r\n")
            await trio.sleep(0.05)
        await peer.send(b"0\r\n")
        await trio.sleep(0.05)
        await peer.send(b"\r\n")
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url(), timeout_s=0.5) as client:
        started = trio.current_time()
        assert (await get(client))[2] == b"012345678901"
        assert trio.current_time() - started > 1.0  # longer than timeout_s, and no timeout


async def test_a_consumer_slower_than_timeout_s_between_pieces_is_no_timeout():
    """The body's clock runs only while the client waits for it."""
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await peer.send(b"6;ext=1\r\nsecond\r\n0\r\n\r\n")
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url(), timeout_s=0.3) as client:
        response = await client.request("GET", "/x")
        pieces = []
        async for piece in response.aiter_bytes():
            pieces.append(piece)
            await trio.sleep(0.5)  # more than timeout_s between two reads
        await response.aclose()
    assert b"".join(pieces) == b"firstsecond"


async def test_chunk_framing_between_pieces_of_one_body_byte_keeps_memory_bounded():
    """Up to MAX_FRAMING_BYTES of framing per byte of body, many times over:
    nothing of the framing is kept."""
    rounds = 200
    piece = b"1;" + b"e" * (MAX_FRAMING_BYTES - 100) + b"\r\nx\r\n"
    wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + piece * rounds + b"0\r\n\r\n"

    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            view = memoryview(wire)
            for i in range(0, len(view), 1 << 20):
                await peer.stream.send_all(view[i:i + (1 << 20)])

    async with serve(handler) as server, open_client(server.url()) as client:
        size, peak = await body_size_and_peak_memory(client)
    assert size == rounds
    assert peak < 2 * 1024 * 1024, f"{peak} bytes at the peak for {len(wire)} bytes of framing"


MIB = 1024 * 1024


@pytest.mark.parametrize("framing", ["content-length", "one huge chunk", "until eof", "one-byte chunks"])
async def test_a_large_body_streams_in_bounded_memory(framing):
    size = 256 * 1024 if framing == "one-byte chunks" else 48 * MIB
    body = b"z" * size
    if framing == "content-length":
        wire = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size + body
    elif framing == "one huge chunk":
        wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x\r\n" % size + body + b"\r\n0\r\n\r\n"
    elif framing == "until eof":
        wire = b"HTTP/1.1 200 OK\r\n\r\n" + body
    else:
        wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"1\r\nz\r\n" * size + b"0\r\n\r\n"
    del body

    async def handler(peer: Peer) -> None:
        await peer.request()
        view = memoryview(wire)
        for i in range(0, len(view), 1 << 20):
            if not await quietly(peer.stream.send_all, view[i:i + (1 << 20)]):
                return
        if framing != "until eof":  # (else the end of the body is the close)
            await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        got, peak = await body_size_and_peak_memory(client)
    assert got == size
    assert peak < 4 * MIB, f"{peak} bytes at the peak for a {size}-byte body ({framing})"


@pytest.mark.parametrize("extra", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nFAKE",
    b"FAKE",  # more body than the Content-Length said
])
async def test_bytes_after_a_response_in_a_later_segment_never_answer_the_next_request(extra):
    async def handler(peer: Peer) -> None:
        while (req := await peer.request()) is not None:
            await peer.send(ok(req.target.encode()))
            if peer.number == 1:
                await trio.sleep(0.05)
                await peer.send(extra)  # after the client has read the response to its end
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client, "/a"))[2] == b"/v1/a"
        await trio.sleep(0.2)
        assert (await get(client, "/b"))[2] == b"/v1/b"
    assert server.accepted == 2


class _Corked(trio.abc.Stream):
    """A transport stream whose writes are held while ``corked`` and sent in one piece by :meth:`flush`,
    so that TLS records written apart reach the peer in one TCP segment."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        self.corked = False
        self.held = bytearray()

    async def send_all(self, data) -> None:
        if self.corked:
            self.held += data
            await trio.lowlevel.checkpoint()
        else:
            await self.inner.send_all(data)

    async def flush(self) -> None:
        self.corked = False
        held, self.held = bytes(self.held), bytearray()
        await self.inner.send_all(held)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None) -> bytes:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def server_tls(tmp_path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context with a certificate for 127.0.0.1 from a CA the client is made to trust."""
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(empty))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    return context


@contextlib.asynccontextmanager
async def serve_tls_corked(handler, context: ssl.SSLContext) -> AsyncIterator[Server]:
    server = Server()

    async def on_connection(tcp: trio.SocketStream) -> None:
        server.accepted += 1
        corked = _Corked(tcp)
        stream = trio.SSLStream(corked, context, server_side=True, https_compatible=True)
        try:
            await handler(Peer(stream, server, server.accepted), corked)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            server.seen_eof()
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, on_connection, 0, host="127.0.0.1"))
        server.port = listeners[0].socket.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("extra", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nFAKE",
    b"FAKE",
])
async def test_over_tls_bytes_after_a_response_in_the_same_segment_never_answer_the_next_request(
        server_tls, extra):
    """The extra bytes come in a TLS record of their own, in the same TCP
    segment as the response's: read from the socket with it and held inside
    the TLS layer, where polling the socket does not see them."""

    async def handler(peer: Peer, corked: _Corked) -> None:
        while (req := await peer.request()) is not None:
            if peer.number == 1 and len(peer.server.requests) == 1:
                corked.corked = True
                await peer.send(ok(req.target.encode()))  # one TLS record
                await peer.send(extra)  # another
                await corked.flush()  # both in one segment
            else:
                await peer.send(ok(req.target.encode()))
        peer.server.seen_eof()

    async with serve_tls_corked(handler, server_tls) as server, \
            open_client(f"https://127.0.0.1:{server.port}/v1") as client:
        assert (await get(client, "/a"))[2] == b"/v1/a"
        await trio.sleep(0.1)
        assert (await get(client, "/b"))[2] == b"/v1/b"
        assert (await get(client, "/c"))[2] == b"/v1/c"  # and a clean connection is kept
    assert server.accepted == 2


async def test_over_tls_bytes_left_in_a_record_after_a_head_read_cut_at_the_bound_never_answer_the_next_request(
        server_tls):
    """The last read of a head near MAX_HEAD_BYTES asks only for what the
    bound leaves; a response ending exactly there leaves the rest of its TLS
    record decrypted inside the TLS layer."""
    fake = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nFAKE"

    async def handler(peer: Peer, corked: _Corked) -> None:
        while (req := await peer.request()) is not None:
            if len(peer.server.requests) > 1:
                await peer.send(ok(req.target.encode()))
                continue
            head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"
            filler = b"x-filler: " + b"f" * 990 + b"\r\n"
            while len(head) + len(filler) < MAX_HEAD_BYTES - 400:
                head += filler
            head += b"x-last: " + b"l" * (MAX_HEAD_BYTES - len(head) - 14) + b"\r\n\r\n"
            assert len(head) + 2 == MAX_HEAD_BYTES  # the response ends where the bound cuts the read
            cut = len(head) - 200
            corked.corked = True
            for i in range(0, cut, 16384):
                await peer.send(head[i:min(i + 16384, cut)])  # records of their own
            await peer.send(head[cut:] + b"ok" + fake)  # the head's end, the body, and a stray response
            await corked.flush()
        peer.server.seen_eof()

    async with serve_tls_corked(handler, server_tls) as server, \
            open_client(f"https://127.0.0.1:{server.port}/v1") as client:
        assert (await get(client, "/a"))[2] == b"ok"
        assert (await get(client, "/b"))[2] == b"/v1/b"
    assert server.accepted == 2


@pytest.mark.parametrize("close", ["fin", "reset"])
async def test_a_server_closing_after_every_response_without_saying_so_costs_no_request(close):
    async def handler(peer: Peer) -> None:
        req = await peer.request()
        assert req is not None
        await peer.send(ok(req.target.encode()))
        if close == "reset":
            await trio.testing.wait_all_tasks_blocked(0.001)
            peer.reset()

    async with serve(handler) as server, open_client(server.url()) as client:
        for i in range(30):
            assert (await get(client, f"/r{i}"))[2] == f"/v1/r{i}".encode()
    assert len(server.requests) >= 30  # (a request resent after a close the client did not see yet counts twice)


@pytest.mark.parametrize("first", [b"\r\n", b"H", b"HTTP/1.1 100 Continue\r\n\r\n"])
async def test_a_kept_connection_that_sent_any_byte_before_closing_is_never_resent_on(first):
    async def handler(peer: Peer) -> None:
        assert await peer.request() is not None
        await peer.send(ok())
        assert await peer.request() is not None
        await peer.send(first)
        await trio.testing.wait_all_tasks_blocked(0.01)

    async with serve(handler) as server, open_client(server.url()) as client:
        await get(client)
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="closed the connection before"):
            await get(client)
    assert server.accepted == 1 and len(server.requests) == 2


@pytest.mark.parametrize("server_reads", [False, True])
async def test_an_early_answer_while_the_request_body_is_still_being_sent(server_reads):
    """A server answering (413) and closing before it read a large body, or
    answering and then reading the rest: an error or the answer, within
    timeout_s, never a hang."""
    body = b"{" + b" " * (8 * MIB) + b"}"

    async def handler(peer: Peer) -> None:
        while b"\r\n\r\n" not in peer.buf:
            peer.buf += await peer.stream.receive_some(65536)
        if server_reads:
            await peer.send(ok(b"early"))
            await peer.wait_eof()
        else:
            await peer.send(b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
            peer.reset()

    async with serve(handler) as server, open_client(server.url(), timeout_s=2) as client:
        started = trio.current_time()
        with trio.fail_after(10):
            try:
                status, _, got = await get(client, method="POST", body=body)
            except HTTPError as exc:
                assert not server_reads, exc
                assert isinstance(exc, HTTPConnectionError)
            else:
                assert (status, got) == (200, b"early")
        assert trio.current_time() - started < 6


async def test_an_early_answer_from_a_server_that_never_reads_the_body_is_a_timeout():
    body = b"x" * (64 * MIB)  # more than any socket buffer takes

    async def handler(peer: Peer) -> None:
        while b"\r\n\r\n" not in peer.buf:
            peer.buf += await peer.stream.receive_some(65536)
        await peer.send(ok(b"early"))
        await trio.sleep(30)

    async with serve(handler) as server, open_client(server.url(), timeout_s=0.5) as client:
        started = trio.current_time()
        with trio.fail_after(10), pytest.raises(HTTPTimeout, match="could not send"):
            await get(client, method="POST", body=body)
        assert trio.current_time() - started < 3


@pytest.mark.parametrize("version", [b"HTTP/1.0", b"HTTP/1.1"])
async def test_http_1_0_answers_are_kept_only_when_they_say_keep_alive(version):
    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            if version == b"HTTP/1.0":
                await peer.send(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok")
            else:
                await peer.send(b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok")

    async with serve(handler) as server, open_client(server.url()) as client:
        for _ in range(3):
            assert (await get(client))[2] == b"ok"
    assert server.accepted == (3 if version == b"HTTP/1.0" else 1)


# ---- a hostile proxy ----------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "error"), [
    (b"HTTP/1.1 150 Odd\r\ncontent-length: 5\r\n\r\nEVIL!HTTP/1.1 200 OK\r\n\r\n", "malformed HTTP response"),
    (b"HTTP/1.1 000 Zero\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", "malformed HTTP response"),
    (b"HTTP/1.1 200 OK\r\n\r\nnot TLS", "sent data before the tunnel opened"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc", "sent data before the tunnel opened"),
    (b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 20_000 + b"\r\n", f"larger than {MAX_HEAD_BYTES}"),
])
async def test_a_proxy_answering_connect_with_a_body_or_an_oversized_head_is_refused(monkeypatch, answer, error):
    async def handler(peer: Peer) -> None:
        assert await peer.request() is not None
        await quietly(peer.send, answer)
        await peer.wait_eof()

    async with serve(handler) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        async with open_client("https://api.example.invalid/v1") as client:
            with trio.fail_after(10), pytest.raises(HTTPConnectionError, match=error):
                await get(client)


async def test_a_proxy_trickling_its_connect_answer_is_a_timeout_within_timeout_s(monkeypatch):
    async def handler(peer: Peer) -> None:
        assert await peer.request() is not None
        for byte in b"HTTP/1.1 200 Connection established\r\n" + b"x" * 10_000:
            if not await quietly(peer.send, bytes([byte])):
                return
            await trio.sleep(0.02)

    async with serve(handler) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        async with open_client("https://api.example.invalid/v1", timeout_s=0.5) as client:
            started = trio.current_time()
            with trio.fail_after(10), pytest.raises(HTTPTimeout, match="could not connect"):
                await get(client)
            assert trio.current_time() - started < 3


# ---- request side -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "a\x01b", "a\x1bb", "a\x7fb", "a\x1cb", "a\x1fb", "a\x0cb", "a\x85b", "a\u2028b", "a\u0000b",
    "key\r\n\r\nGET /smuggled HTTP/1.1", "\r\n", " ", "\t",
])
async def test_a_header_value_with_a_control_character_is_refused_before_sending(value):
    async with serve(answer_all) as server, open_client(server.url()) as client:
        with pytest.raises(ValueError, match="X-Api-Key"):
            await get(client, headers=[("X-Api-Key", value)])
        assert (await get(client, "/after"))[2] == b"/v1/after"
    assert [r.target for r in server.requests] == ["/v1/after"]


@pytest.mark.parametrize("name", ["HOST", "host", "Content-length", "TRANSFER-ENCODING"])
async def test_a_caller_header_the_client_writes_itself_is_refused_in_any_case(name):
    async with serve(answer_all) as server, open_client(server.url()) as client:
        with pytest.raises(ValueError, match="set by the client"):
            await get(client, headers=[(name, "1")])
    assert server.accepted == 0


async def test_a_very_long_header_value_is_sent_intact_and_checked_in_linear_time():
    long = "k" * (4 * MIB)
    async with serve(answer_all) as server, open_client(server.url()) as client:
        await get(client, headers=[("Authorization", long)])
        # a check that backtracks without bound is quadratic: days on these 4 MiB values, where the
        # linear one takes about half a second each; the bound sits far from both, so a slow or
        # loaded machine does not fail it
        with trio.fail_after(60):
            for hostile in ("a " * (2 * MIB) + "\x00", "a\t" * (2 * MIB) + " ", "a" * (4 * MIB) + "\x01"):
                with pytest.raises(ValueError):
                    await get(client, headers=[("Authorization", hostile)])
    assert server.requests[0].headers["authorization"] == long


@pytest.mark.parametrize("path", ["@evil.example/x", ".evil.example/x", ":1/x", "x"])
async def test_a_path_that_would_change_the_origin_through_a_proxy_is_refused(monkeypatch, path):
    """With no path prefix, the absolute form is the origin and the path
    joined: a path not opening with ``/`` would name another host."""
    async with serve(answer_all) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        async with open_client("http://api.example.invalid") as client:
            with pytest.raises(ValueError, match="request target"):
                await get(client, path)
            assert (await get(client, "/ok"))[2] == b"http://api.example.invalid/ok"
    assert [r.target for r in proxy.requests] == ["http://api.example.invalid/ok"]


@pytest.mark.parametrize("path", ["x", "?a=1"])
async def test_a_path_not_opening_with_a_slash_after_an_empty_prefix_is_refused(path):
    async with serve(answer_all) as server, open_client(f"http://127.0.0.1:{server.port}") as client:
        with pytest.raises(ValueError, match="request target"):
            await get(client, path)
    assert server.accepted == 0


def test_a_host_from_the_url_with_a_control_character_is_refused_at_construction():
    with pytest.raises(ValueError, match="Host"):
        HTTPClient("http://a\x01b/v1", timeout_s=1)
