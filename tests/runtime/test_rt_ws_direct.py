"""The chat socket is served straight off its TCP connection (``ongridd.server.directws``):
its handshake is read and answered by the daemon's front door, every other
request goes to hypercorn with the bytes already read put back.  What a client
sees is the same either way: these tests speak raw TCP to a real daemon."""

from __future__ import annotations

import contextlib
import json
import logging

import httpx2
import pytest
import trio
from rt_helpers import open_daemon, raw_chat_socket

from ongridd.server import connections, directws

HANDSHAKE = (b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
SCRIPT = {"default": [{"content": "hi"}]}


def _masked_text(text: str) -> bytes:
    """A client text frame (mask key 0: the payload as it is)."""
    payload = text.encode()
    assert len(payload) < 126
    return bytes([0x81, 0x80 | len(payload)]) + b"\0\0\0\0" + payload


def _with(head: bytes, old: bytes, new: bytes) -> bytes:
    assert old in head
    return head.replace(old, new)


@pytest.mark.parametrize("head,taken", [
    pytest.param(HANDSHAKE, True, id="plain"),
    pytest.param(_with(HANDSHAKE, b"GET /ws ", b"GET /ws?x=1 "), True, id="query-string"),
    pytest.param(_with(HANDSHAKE, b"Connection: Upgrade", b"Connection: keep-alive, Upgrade"), True,
                 id="connection-tokens"),
    pytest.param(_with(HANDSHAKE, b"GET /ws ", b"GET /wsx "), False, id="other-path"),
    pytest.param(_with(HANDSHAKE, b"GET /ws ", b"GET /w%73 "), False, id="escaped-path"),
    pytest.param(_with(HANDSHAKE, b"GET /ws ", b"POST /ws "), False, id="post"),
    pytest.param(_with(HANDSHAKE, b"HTTP/1.1", b"HTTP/1.0"), False, id="http-1.0"),
    pytest.param(_with(HANDSHAKE, b"Host: 127.0.0.1\r\n", b""), False, id="no-host"),
    pytest.param(_with(HANDSHAKE, b"Host: 127.0.0.1\r\n", b"Host: a\r\nHost: b\r\n"), False, id="two-hosts"),
    pytest.param(_with(HANDSHAKE, b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n"), False, id="a-body"),
    pytest.param(_with(HANDSHAKE, b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n"), False, id="chunked"),
    pytest.param(_with(HANDSHAKE, b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", b""), False, id="no-key"),
    pytest.param(_with(HANDSHAKE, b"Version: 13", b"Version: 8"), False, id="old-version"),
    pytest.param(_with(HANDSHAKE, b"Upgrade: websocket", b"Upgrade: h2c"), False, id="other-upgrade"),
    pytest.param(_with(HANDSHAKE, b"Connection: Upgrade", b"Connection: keep-alive"), False, id="no-upgrade-token"),
    pytest.param(_with(HANDSHAKE, b"Host: 127.0.0.1", b"Host: 127.0.0.1\x01"), False, id="control-in-a-value"),
    pytest.param(HANDSHAKE[:-2], False, id="head-not-ended"),
    pytest.param(HANDSHAKE.replace(b"\r\n", b"\n"), False, id="bare-lf"),
    pytest.param(_with(HANDSHAKE, b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\n"), False, id="one-bare-lf"),
    pytest.param(_with(HANDSHAKE, b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\r\n"), False, id="bare-cr"),
    pytest.param(_with(HANDSHAKE, b"GET /ws ", b"GET /ws  "), False, id="two-spaces"),
    pytest.param(b"\r\n" + HANDSHAKE, False, id="leading-empty-line"),
])
def test_only_a_plain_handshake_for_the_chat_socket_is_taken(head, taken):
    request = directws._chat_handshake(head + b"behind")
    assert (request is not None) is taken
    if taken:
        assert request.key == b"dGhlIHNhbXBsZSBub25jZQ==" and request.rest == b"behind"
        assert (b"host", b"127.0.0.1") in request.headers


async def _exchange(port: int, pieces: list[bytes], *, until: bytes | None = None, pause_s: float = 0.0) -> bytes:
    """Send ``pieces`` one by one on a new TCP connection (``pause_s`` apart), then read until
    ``until`` has come (or the daemon ended the connection); returns what was read."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    got = b""
    async with stream:
        for piece in pieces:
            await stream.send_all(piece)
            await trio.sleep(pause_s)
        with trio.fail_after(10):
            while until is None or until not in got:
                data = await stream.receive_some(65536)
                if not data:
                    break
                got += data
    return got


def _port(d) -> int:
    return int(d.base_url.rsplit(":", 1)[1])


async def test_a_handshake_in_pieces_with_a_frame_behind_it_is_served(tmp_path):
    async with open_daemon(tmp_path, SCRIPT) as d:
        # a byte at a time, then the head's end and a hello in one send
        pieces = [bytes([b]) for b in HANDSHAKE[:-4]] + [HANDSHAKE[-4:] + _masked_text('{"type":"hello"}')]
        got = await _exchange(_port(d), pieces, until=b'"resumed"', pause_s=0.002)
        assert got.startswith(b"HTTP/1.1 101 ")
        assert b"sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in got  # RFC 6455 1.3's example
        assert b'"type": "session"' in got or b'"type":"session"' in got


async def test_other_requests_go_to_the_http_server_with_what_was_read(tmp_path):
    async with open_daemon(tmp_path, SCRIPT) as d:
        port = _port(d)
        health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        got = await _exchange(port, [health[:2], health[2:]], pause_s=0.05)  # "GE" first: could be /ws
        assert got.startswith(b"HTTP/1.1 200 ")
        got = await _exchange(port, [b"GET /wsx HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"], until=b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 404 ")
        got = await _exchange(port, [_with(HANDSHAKE, b"GET /ws ", b"GET /wsx ")], until=b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 400 ")  # the app's answer to a websocket it does not serve
        # an escaped path is still the chat socket, served through hypercorn as before
        got = await _exchange(port, [_with(HANDSHAKE, b"GET /ws ", b"GET /w%73 ")], until=b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 101 ")
        # a head larger than the server takes: hypercorn's answer, and the daemon serves on
        huge = HANDSHAKE[:-2] + b"X-Pad: " + b"p" * (64 * 1024) + b"\r\n\r\n"
        got = await _exchange(port, [huge])
        assert not got.startswith(b"HTTP/1.1 101 ")
        async with httpx2.AsyncClient() as http:
            assert (await http.get(d.base_url + "/healthz")).status_code == 200


async def test_ping_close_and_refusal_on_the_direct_socket(tmp_path):
    from wsproto.events import CloseConnection, Ping, Pong

    async with open_daemon(tmp_path, SCRIPT) as d:
        stream, client = await raw_chat_socket(d.base_url)
        async with stream:
            # while it is open the connection is the front door's, counted among the live ones
            assert any(isinstance(live, directws.FrontDoor) for live in connections._LIVE)
            await stream.send_all(client.send(Ping(payload=b"are you there")))
            await stream.send_all(client.send(CloseConnection(code=1000, reason="bye")))
            events: list = []
            with trio.fail_after(10):
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        break
                    client.receive_data(data)
                    events.extend(client.events())
        assert [e.payload for e in events if isinstance(e, Pong)] == [b"are you there"]
        assert [e.code for e in events if isinstance(e, CloseConnection)] == [1000]

        # a browser page of another site is refused before the handshake is answered
        got = await _exchange(_port(d), [_with(HANDSHAKE, b"\r\n\r\n", b"\r\nOrigin: https://evil.example\r\n\r\n")])
        status, _, body = got.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 403 ")
        assert json.loads(body)["error"]["code"] == "forbidden"
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"


def test_install_is_idempotent_and_fails_loudly_without_its_hook(monkeypatch):
    from hypercorn.trio import run

    directws.install()
    directws.install()
    assert run.TCPServer is directws.FrontDoor
    assert directws.FrontDoor.hypercorn_handler is not directws.FrontDoor
    monkeypatch.delattr(run, "TCPServer")
    with pytest.raises(RuntimeError, match="TCPServer is gone"):
        directws.install()


async def test_a_bare_lf_head_is_answered_by_the_http_server_at_once(tmp_path):
    async with open_daemon(tmp_path, SCRIPT) as d:
        got = await _exchange(_port(d), [HANDSHAKE.replace(b"\r\n", b"\n")], until=b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 101 ")  # hypercorn's parser takes bare LF, as before


async def test_a_slow_head_gets_one_keep_alive_timeout_in_all(tmp_path, monkeypatch):
    # "GET /w" could be the chat socket's head: the front door waits; once it turns out to be
    # something else the HTTP server gets what is left of the time, not a fresh timeout
    from ongridd import daemon

    monkeypatch.setattr(daemon, "HTTP_KEEP_ALIVE_S", 2.0)
    async with open_daemon(tmp_path, SCRIPT) as d:
        stream = await trio.open_tcp_stream("127.0.0.1", _port(d))
        began = trio.current_time()
        async with stream:
            await stream.send_all(b"GET /w")
            await trio.sleep(1.5)
            await stream.send_all(b"sx HTTP/1.1\r\n")  # not the chat socket: to hypercorn at 1.5 s
            with trio.fail_after(10):
                with contextlib.suppress(trio.BrokenResourceError):  # closed, or reset
                    while True:
                        await stream.send_all(b"X")  # a header trickled, never ended
                        with trio.move_on_after(0.1):
                            if not await stream.receive_some(4096):
                                break
        assert trio.current_time() - began < 3.2  # 2 s in all (a fresh 2 s would end it at 3.5 s)


@pytest.mark.parametrize("extra", [b"", b"Origin: https://evil.example\r\n"], ids=["accepted", "refused"])
async def test_a_client_that_resets_right_after_its_handshake_leaves_no_error(tmp_path, caplog, extra):
    import socket
    import struct

    async with open_daemon(tmp_path, SCRIPT) as d:
        for _ in range(5):
            sock = trio.socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
            await sock.connect(("127.0.0.1", _port(d)))
            await sock.send(_with(HANDSHAKE, b"\r\n\r\n", b"\r\n" + extra + b"\r\n"))
            sock.close()
        await trio.sleep(0.5)
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"
    failed = [r.getMessage() for r in caplog.records if r.getMessage().endswith("_connection_failed")]
    assert failed == []


async def _answer_then_end(port: int, request: bytes) -> tuple[bytes, float]:
    """Send ``request`` and read until the daemon ends the connection: (all it sent, seconds it took)."""
    began = trio.current_time()
    got = await _exchange(port, [request])  # fails after 10 s when the connection stays open
    return got, trio.current_time() - began


@pytest.mark.parametrize("head", [
    pytest.param(_with(HANDSHAKE, b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", b""), id="no-key"),
    pytest.param(_with(HANDSHAKE, b"Version: 13", b"Version: 8"), id="old-version"),
    pytest.param(_with(HANDSHAKE, b"HTTP/1.1", b"HTTP/1.0"), id="http-1.0"),
    pytest.param(_with(_with(HANDSHAKE, b"GET /ws ", b"GET /healthz "),
                       b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", b""), id="other-path-no-key"),
])
async def test_a_handshake_the_http_server_refuses_ends_its_connection(tmp_path, head):
    # hypercorn answered 400 with "connection: close" and kept the connection open for ever: a client
    # sending such a head on many connections held a file descriptor each until /healthz went unanswered
    async with open_daemon(tmp_path, SCRIPT) as d:
        got, took = await _answer_then_end(_port(d), head)
        assert got.startswith(b"HTTP/1.1 400 ") and b"connection: close" in got.lower(), got
        assert took < 5, took


@pytest.mark.parametrize("path", [b"/ws", b"/w%73"], ids=["front-door", "through-the-http-server"])
@pytest.mark.parametrize("body", [b"Content-Length: 5\r\n\r\nhello", b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"],
                         ids=["content-length", "chunked"])
async def test_a_handshake_with_a_body_is_refused_400_cleanly(tmp_path, caplog, path, body):
    # hypercorn took it for an upgrade and h11 then refused our own 101: an ERROR traceback in the log
    # and a websocket close frame written onto the HTTP stream
    head = _with(_with(HANDSHAKE, b"GET /ws ", b"GET " + path + b" "), b"\r\n\r\n", b"\r\n" + body)
    connections.REFUSALS.reset()  # its line is written whatever an earlier test refused just before
    async with open_daemon(tmp_path, SCRIPT) as d:
        got, took = await _answer_then_end(_port(d), head)
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"
    assert got.startswith(b"HTTP/1.1 400 ") and took < 5, got
    answer, _, rest = got.partition(b"\r\n\r\n")
    # the front door's refusal says why; the HTTP server's is hypercorn's own (empty); no frame bytes either way
    assert rest == (b'{"error": {"code": "bad_request", "message": "a websocket handshake has no body"}}'
                    if path == b"/ws" else b""), got
    logged = [(r.levelno, r.getMessage(), getattr(r, "ongrid_fields", None)) for r in caplog.records]
    assert not [m for level, m, _ in logged if level >= logging.ERROR or m.endswith("_connection_failed")], logged
    assert ("websocket_refused", {"reason": "a handshake with a body"}) in [
        (m, {"reason": (f or {}).get("reason")}) for _, m, f in logged], logged


@pytest.mark.parametrize("path", [b"/ws", b"/w%73"], ids=["front-door", "through-the-http-server"])
async def test_content_length_0_is_no_body_and_the_handshake_is_served(tmp_path, path):
    head = _with(_with(HANDSHAKE, b"GET /ws ", b"GET " + path + b" "), b"\r\n\r\n", b"\r\nContent-Length: 0\r\n\r\n")
    async with open_daemon(tmp_path, SCRIPT) as d:
        got = await _exchange(_port(d), [head], until=b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 101 "), got


async def test_data_sent_before_the_answer_through_the_http_server_is_refused_400_cleanly(tmp_path, caplog):
    # RFC 6455 has a client wait for the server's answer; hypercorn answered 400 to such data but let the
    # app's accept through (an ERROR traceback, a close frame written onto the HTTP stream)
    head = _with(HANDSHAKE, b"GET /ws ", b"GET /w%73 ") + _masked_text('{"type":"hello"}')
    async with open_daemon(tmp_path, SCRIPT) as d:
        for _ in range(5):
            got, took = await _answer_then_end(_port(d), head)
            assert took < 5, took
            # either the app accepted first (then the frame is read: a session frame) or the data came
            # first: then a plain 400, and nothing after it
            if not got.startswith(b"HTTP/1.1 101 "):
                assert got.startswith(b"HTTP/1.1 400 ") and got.endswith(b"\r\n\r\n"), got
    logged = [(r.levelno, r.getMessage(), getattr(r, "ongrid_fields", None)) for r in caplog.records]
    assert not [m for level, m, _ in logged if level >= logging.ERROR or m.endswith("_connection_failed")], logged


async def test_the_daemon_speaks_http_1_1_only(tmp_path, monkeypatch):
    # hypercorn switched to HTTP/2 on the prior-knowledge preface and stopped the idle timer for good:
    # 24 bytes held a connection (a file descriptor) for ever
    from ongridd import daemon

    monkeypatch.setattr(daemon, "HTTP_KEEP_ALIVE_S", 2.0)
    async with open_daemon(tmp_path, SCRIPT) as d:
        port = _port(d)
        for preface in (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\n"):
            got, took = await _answer_then_end(port, preface)
            assert got.startswith(b"HTTP/1.1 4") and took < 4, (got, took)  # an HTTP/1.1 refusal, then closed
        h2c = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
        got, took = await _answer_then_end(port, h2c)  # the upgrade ignored: answered in HTTP/1.1
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b'{"status": "ok"}') and took < 4, (got, took)


@pytest.mark.parametrize("path", [b"/healthz", b"/api/changes"])
async def test_a_request_framed_two_ways_is_refused_and_its_connection_closed(tmp_path, caplog, path):
    # h11 went by Transfer-Encoding and kept the connection: a proxy in front that went by Content-Length
    # would see the chunked body's bytes as the start of the next request (RFC 9112 6.3: refuse or answer,
    # then close the connection either way)
    request = (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    connections.FRAMING_REFUSALS.reset()
    async with open_daemon(tmp_path, SCRIPT) as d:
        got, took = await _answer_then_end(_port(d), request)
        assert got.startswith(b"HTTP/1.1 400 ") and b"connection: close" in got.lower() and took < 5, got
        assert b"both Content-Length and Transfer-Encoding" in got
        # a request behind it is never answered: the connection ends (hypercorn, given data behind a
        # request that closes, answers that request or ends the connection at once, as it does for a
        # "Connection: close" request with one behind it)
        for _ in range(5):
            got, took = await _answer_then_end(_port(d), request + smuggled)
            assert got.count(b"HTTP/1.1 ") <= 1 and b" 200 " not in got and took < 5, got
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"
    assert "http_request_refused" in [r.getMessage() for r in caplog.records]


async def test_a_chunked_request_alone_is_served(tmp_path):
    request = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
               b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    async with open_daemon(tmp_path, SCRIPT) as d:
        got, _ = await _answer_then_end(_port(d), request)
    assert got.count(b"HTTP/1.1 200 ") == 2, got
