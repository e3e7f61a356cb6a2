"""ongridd.llm.http on the wire, against real Trio sockets: request heads
checked before a byte is written (no header can add a line), the response
parser's bounds (head, chunk framing and trailers), bodies split over many
reads, malformed responses, and when a connection is or is not kept."""

from __future__ import annotations


import pytest
import trio
import trio.testing
from tests.llm.test_http_client import (  # noqa: F401  (clean_env: an autouse fixture, used here too)
    Peer,
    answer_all,
    answer_once,
    chunked,
    clean_env,
    get,
    ok,
    open_client,
    serve,
)

from ongridd.llm.http import MAX_FRAMING_BYTES, MAX_HEAD_BYTES, HTTPClient, HTTPConnectionError


# ---- request heads -------------------------------------------------------------------------


@pytest.mark.parametrize("header", [
    ("X-Agent", "triage\r\nX-Injected: 1"),
    ("X-Agent", "triage\nX-Injected: 1"),
    ("X-Agent", "triage\rX-Injected: 1"),
    ("X-Agent", "tri\x00age"),
    ("X-Agent", "tri\x0bage"),
    ("X-Agent", " leading blank"),
    ("X-Agent", "trailing blank\t"),
    ("X-Agent", "caf\u00e9"),
    ("X-Agent\r\nX-Injected", "1"),
    ("X Agent", "1"),
    ("X-Agent:", "1"),
    ("", "1"),
    ("Content-Length", "0"),
    ("transfer-encoding", "chunked"),
    ("Host", "elsewhere.example"),
])
async def test_a_header_that_could_inject_a_line_or_confuse_the_framing_is_refused_before_sending(header):
    async with serve(answer_all) as server, open_client(server.url()) as client:
        with pytest.raises(ValueError, match="HTTP header") as info:
            await get(client, method="POST", body=b"{}", headers=[("Authorization", "Bearer k"), header])
        assert (await get(client, "/after"))[2] == b"/v1/after"  # the client is still usable
    assert server.accepted == 1 and [r.target for r in server.requests] == ["/v1/after"]
    assert "X-Injected: 1" not in str(info.value)  # the value is not quoted (it may be a credential)


async def test_a_refused_value_is_refused_again_after_a_valid_one_was_kept():
    """The line cache is keyed by the exact name and value: a kept valid line
    never stands in for another value of the same header."""
    async with serve(answer_all) as server, open_client(server.url()) as client:
        for _ in range(2):
            await get(client, headers=[("Authorization", "Bearer good")])
        with pytest.raises(ValueError):
            await get(client, headers=[("Authorization", "Bearer good\r\nX-Injected: 1")])
        await get(client, headers=[("Authorization", "Bearer good")])
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer good"] * 3
    assert all("x-injected" not in r.headers for r in server.requests)


async def test_many_distinct_header_values_are_each_checked_and_sent():
    async with serve(answer_all) as server, open_client(server.url()) as client:
        for i in range(600):  # more than the client keeps: the cache starts over, nothing is lost
            await get(client, headers=[("X-Session", f"s-{i}"), ("Accept", "text/event-stream")])
    assert [r.headers["x-session"] for r in server.requests] == [f"s-{i}" for i in range(600)]
    assert server.accepted == 1


@pytest.mark.parametrize("method", ["GE T", "GET\r\n", "", "G\u00c9T"])
async def test_an_illegal_method_is_refused_before_sending(method):
    async with serve(answer_all) as server, open_client(server.url()) as client:
        with pytest.raises(ValueError, match="HTTP"):
            await get(client, method=method)
    assert server.accepted == 0


@pytest.mark.parametrize("path", ["/a b", "/a\r\nX-Injected: 1", "/caf\u00e9"])
async def test_an_illegal_target_is_refused_before_sending(path):
    async with serve(answer_all) as server, open_client(server.url()) as client:
        with pytest.raises(ValueError, match="request target|not ASCII"):
            await get(client, path)
    assert server.accepted == 0


def test_a_user_agent_that_is_no_header_value_is_refused_at_construction():
    with pytest.raises(ValueError, match="User-Agent"):
        HTTPClient("http://127.0.0.1:9/v1", timeout_s=1, user_agent="ongrid\r\nX-Injected: 1")


# ---- bounds ----------------------------------------------------------------------------------


async def test_a_head_over_the_bound_trickled_in_small_pieces_is_refused():
    sent = 0

    async def handler(peer: Peer) -> None:
        nonlocal sent
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\n")
        line = b"x-filler: " + b"f" * 90 + b"\r\n"
        try:
            while sent < 4 * MAX_HEAD_BYTES:  # the client gives up long before this
                await peer.send(line)
                sent += len(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match=f"larger than {MAX_HEAD_BYTES}"):
            await get(client)
        with trio.fail_after(10):
            await server.eof_event.wait()
    assert sent < 4 * MAX_HEAD_BYTES


async def test_informational_heads_count_towards_the_head_bound():
    async def handler(peer: Peer) -> None:
        await peer.request()
        one = b"HTTP/1.1 103 Early Hints\r\nlink: <" + b"/x" * 2000 + b">\r\n\r\n"
        await peer.send(one * (MAX_HEAD_BYTES // len(one) + 2) + ok())
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="head is larger"):
            await get(client)


@pytest.mark.parametrize("where", ["trailer", "chunk extension"])
async def test_chunk_framing_or_trailers_over_the_bound_are_refused(where):
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        if where == "trailer":
            await peer.send(b"0\r\nx-trailer: ")
        else:
            await peer.send(b"5;ext=")
        try:
            for _ in range(4 * MAX_FRAMING_BYTES // 1000):
                await peer.send(b"t" * 1000)  # one endless trailer value / extension: never a body byte
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with serve(handler) as server, open_client(server.url()) as client:
        response = await client.request("GET", "/x")
        pieces = []
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="chunk framing or trailers"):
            async for piece in response.aiter_bytes():
                pieces.append(piece)
        await response.aclose()
    assert pieces == [b"first"]


# ---- bodies over many reads -----------------------------------------------------------------


async def test_a_chunked_sse_stream_sent_a_few_bytes_at_a_time():
    events = [b'data: {"choices":[{"delta":{"content":"word %d"}}]}\n\n' % i for i in range(5)] + [b"data: [DONE]\n\n"]
    answer = chunked(*events, headers=("content-type: text/event-stream",))

    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            for i in range(0, len(answer), 3):  # every split: inside the status line, a header, a chunk size, a CRLF
                await peer.send(answer[i:i + 3])
                await trio.testing.wait_all_tasks_blocked(0.001)
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        for _ in range(2):
            response = await client.request("POST", "/chat/completions", body=b"{}")
            assert response.status == 200 and response.headers["content-type"] == "text/event-stream"
            pieces = [piece async for piece in response.aiter_bytes()]
            await response.aclose()
            assert b"".join(pieces) == b"".join(events)
            assert all(pieces) and len(pieces) > 20  # many reads, each its own piece
    assert server.accepted == 1  # read to its end: kept


async def test_trailers_are_read_and_not_kept_in_the_headers():
    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-head: 1\r\n\r\n"
                            b"3\r\nabc\r\n0\r\nx-trailer: 2\r\n\r\n")

    async with serve(handler) as server, open_client(server.url()) as client:
        status, headers, body = await get(client)
        assert (status, body, headers["x-head"]) == (200, b"abc", "1") and "x-trailer" not in headers
        await get(client)
    assert server.accepted == 1


# ---- malformed responses --------------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 20 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\n\n",  # bare LF line ends
    b"HTTP/2 200 OK\r\n\r\n",
    b"HTTP/1.1200 OK\r\n\r\n",
    b"<html>not http</html>\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nx: a\r\n folded\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n",
])
async def test_a_malformed_status_line_head_or_framing_is_a_connection_error(answer):
    async with serve(lambda peer: answer_once(peer, answer)) as server, \
            open_client(server.url()) as client:
        with trio.fail_after(10), pytest.raises(HTTPConnectionError, match="malformed HTTP response"):
            await get(client)
        with trio.fail_after(10):
            await server.eof_event.wait()  # and the connection is closed


async def test_a_malformed_answer_on_a_kept_connection_is_not_resent():
    async def handler(peer: Peer) -> None:
        assert await peer.request() is not None
        await peer.send(ok())
        assert await peer.request() is not None
        await peer.send(b"HTTP/1.1 OK\r\n\r\n")
        await peer.wait_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        await get(client)
        with pytest.raises(HTTPConnectionError, match="malformed"):
            await get(client)
    assert server.accepted == 1 and len(server.requests) == 2


# ---- keep-alive --------------------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection_for_many_requests_of_both_framings():
    async def handler(peer: Peer) -> None:
        while (req := await peer.request()) is not None:
            answer = req.target.encode()
            await peer.send(ok(answer) if len(peer.server.requests) % 2 else chunked(answer, b"!"))

    async with serve(handler) as server, open_client(server.url()) as client:
        for i in range(20):
            assert (await get(client, f"/r{i}"))[2] == (f"/v1/r{i}" + ("" if i % 2 == 0 else "!")).encode()
    assert server.accepted == 1


@pytest.mark.parametrize("close", ["Connection: close", "connection: keep-alive, Close"])
async def test_a_connection_close_response_is_not_reused_and_the_next_request_gets_a_fresh_one(close):
    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(ok(b"%d" % peer.number, headers=(close,) if peer.number == 1 else ()))
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client))[2] == b"1"
        with trio.fail_after(10):
            await server.eof_event.wait()  # closed by the client right after the response
        assert (await get(client))[2] == b"2"
        assert (await get(client))[2] == b"2"  # and the fresh one is kept
    assert server.accepted == 2


async def test_a_request_saying_connection_close_does_not_keep_the_connection():
    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(ok())
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        await get(client, headers=[("Connection", "close")])
        with trio.fail_after(10):
            await server.eof_event.wait()
        await get(client)
    assert server.accepted == 2 and server.requests[0].headers["connection"] == "close"


@pytest.mark.parametrize("extra", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno",
    b"HTTP/1.1 204 No Content\r\n\r\n",  # a whole second response without body
    b"HTTP/1.1 2",  # the start of one
    b"garbage",
    b"\x00",
])
async def test_bytes_after_a_response_in_the_same_read_mean_the_connection_is_not_reused(extra):
    async def handler(peer: Peer) -> None:
        while (req := await peer.request()) is not None:
            await peer.send(ok(req.target.encode()) + (extra if peer.number == 1 else b""))
        peer.server.seen_eof()

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client, "/a"))[2] == b"/v1/a"  # the response itself is fine
        assert (await get(client, "/b"))[2] == b"/v1/b"  # on a fresh connection: "no" never passes for it
    assert server.accepted == 2


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
])
async def test_the_answer_to_head_has_no_body_and_keeps_the_connection(answer):
    async def handler(peer: Peer) -> None:
        while (req := await peer.request()) is not None:
            await peer.send(answer if req.method == "HEAD" else ok())

    async with serve(handler) as server, open_client(server.url()) as client:
        with trio.fail_after(10):
            status, _, body = await get(client, method="HEAD")
        assert (status, body) == (200, b"")
        assert (await get(client))[2] == b"ok"
    assert server.accepted == 1


@pytest.mark.parametrize("extra", [b"x" * 10, b"0\r\n\r\n"])
async def test_a_body_after_the_answer_to_head_means_the_connection_is_not_reused(extra):
    async def handler(peer: Peer) -> None:
        while (req := await peer.request()) is not None:
            if req.method == "HEAD":
                framing = b"content-length: 10" if len(extra) == 10 else b"transfer-encoding: chunked"
                await peer.send(b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\n" + extra)
            else:
                await peer.send(ok())

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client, method="HEAD"))[2] == b""
        assert (await get(client))[2] == b"ok"
    assert server.accepted == 2


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
async def test_204_and_304_have_no_body_and_keep_the_connection(status):
    async def handler(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(f"HTTP/1.1 {status}\r\netag: x\r\n\r\n".encode())

    async with serve(handler) as server, open_client(server.url()) as client:
        with trio.fail_after(10):
            for _ in range(3):
                assert (await get(client))[2] == b""
    assert server.accepted == 1


async def test_a_body_until_eof_ends_at_eof_and_is_not_reused():
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n")
        for piece in (b"one ", b"two ", b"three"):
            await peer.send(piece)
            await trio.testing.wait_all_tasks_blocked(0.001)

    async with serve(handler) as server, open_client(server.url()) as client:
        assert (await get(client))[2] == b"one two three"
        assert (await get(client))[2] == b"one two three"
    assert server.accepted == 2
