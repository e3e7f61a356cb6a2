"""Chat-socket connections that hold a slot without being a client: hellos
refused again and again, a socket that never says hello, a peer that
vanished (TCP keepalive on every accepted connection)."""

from __future__ import annotations

import json
import socket

import pytest
import trio
from rt_helpers import open_daemon, raw_chat_socket
from trio_websocket import ConnectionClosed, open_websocket_url

from ongridd.server import connections, ws


async def test_a_connection_is_closed_after_its_fifth_refused_hello(tmp_path, monkeypatch):
    monkeypatch.setenv("RT_TEST_TOKENS", "alice:tok-alice-0123456789")
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]},
                           server={"tokens_env": "RT_TEST_TOKENS"}) as d, d.ws(None) as c:
        for attempt in range(1, ws.MAX_REFUSED_HELLOS + 1):
            await c.send({"type": "hello", "token": f"guess-{attempt}"})
            err = await c.recv()
            assert err["type"] == "error" and err["code"] == "unauthorized"
            assert ("closing" in err["message"]) is (attempt == ws.MAX_REFUSED_HELLOS), err
        with pytest.raises(ConnectionClosed) as closed, trio.fail_after(10):
            await c.conn.get_message()
        assert closed.value.reason.code == ws.CLOSE_POLICY_VIOLATION
        async with d.ws("main", token="tok-alice-0123456789") as alice:  # a new connection is served
            assert (await alice.ask("still there?"))["text"] == "hi"


async def test_a_socket_without_hello_is_closed_and_one_with_hello_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(ws, "HELLO_TIMEOUT_S", 1.0)
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        async with d.ws("kept") as kept, open_websocket_url(d.ws_url) as silent:
            with trio.fail_after(10):
                frame = await silent.get_message()
            assert '"unauthorized"' in frame and "no accepted hello within 1 s" in frame
            with pytest.raises(ConnectionClosed) as closed, trio.fail_after(10):
                await silent.get_message()
            assert closed.value.reason.code == ws.CLOSE_POLICY_VIOLATION
            assert (await kept.ask("after the deadline"))["text"] == "hi"  # attached in time: untouched


async def test_accepted_connections_have_tcp_keepalive(tmp_path):
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d, d.ws("k"):
        port = int(d.base_url.rsplit(":", 1)[1])
        socks = [sock for sock in map(connections._socket_of, list(connections._LIVE))
                 if sock is not None and sock.getsockname()[1] == port]
        assert socks, "no live connection of this daemon found"
        for sock in socks:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == connections.KEEPALIVE_IDLE_S
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == connections.USER_TIMEOUT_MS


async def _raw_socket(url: str, extra: str = "") -> tuple[trio.SocketStream, bytes]:
    """A websocket handshake on a raw TCP stream: ``(stream, the answer's head)``."""
    import base64
    import os

    host = url.removeprefix("http://")
    name, port = host.rsplit(":", 1)
    stream = await trio.open_tcp_stream(name, int(port))
    key = base64.b64encode(os.urandom(16)).decode()
    await stream.send_all((f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n{extra}\r\n").encode())
    head = b""
    with trio.fail_after(10):
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(4096)
    return stream, head


def _live_on(port: int) -> int:
    return sum(1 for sock in map(connections._socket_of, list(connections._LIVE))
               if sock is not None and sock.fileno() >= 0 and sock.getsockname()[1] == port)


async def test_frames_behind_a_policy_close_do_not_keep_the_connection(tmp_path, monkeypatch):
    # more frames than the server queues for the app (10), sent behind the hellos that get the
    # socket closed: once the client has gone, the daemon holds nothing of the connection
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import CloseConnection, Request, TextMessage

    monkeypatch.setenv("RT_TEST_TOKENS", "alice:tok-alice-0123456789")
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]},
                           server={"tokens_env": "RT_TEST_TOKENS"}) as d:
        port = int(d.base_url.rsplit(":", 1)[1])
        for _ in range(3):
            host = d.base_url.removeprefix("http://")
            stream = await trio.open_tcp_stream(host.rsplit(":", 1)[0], port)
            client = WSConnection(ConnectionType.CLIENT)
            await stream.send_all(client.send(Request(host=host, target="/ws")))
            frames = [json.dumps({"type": "hello", "token": "wrong"})] * ws.MAX_REFUSED_HELLOS + ["x"] * 30
            closed, sent = None, False
            with trio.fail_after(15):
                while closed is None:
                    data = await stream.receive_some(65536)
                    assert data, "the daemon dropped the connection without a close frame"
                    client.receive_data(data)
                    for event in client.events():
                        if not sent:
                            await stream.send_all(b"".join(client.send(TextMessage(data=f)) for f in frames))
                            sent = True
                        if isinstance(event, CloseConnection):
                            closed = event.code
            assert closed == ws.CLOSE_POLICY_VIOLATION
            await stream.aclose()
        with trio.fail_after(10):
            while _live_on(port):
                await trio.sleep(0.05)
        async with d.ws("main", token="tok-alice-0123456789") as alice:
            assert (await alice.ask("still there?"))["text"] == "hi"


async def test_websocket_compression_is_never_negotiated(tmp_path):
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        stream, head = await _raw_socket(d.base_url, "Sec-WebSocket-Extensions: permessage-deflate; "
                                                     "client_max_window_bits\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        assert b"sec-websocket-extensions" not in head.lower()
        await stream.aclose()
        async with d.ws("plain") as c:  # and a plain client is served as before
            assert (await c.ask("hello"))["text"] == "hi"


@pytest.mark.parametrize("request_head", [
    "GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
    "GET /healthz HTTP/1.0\r\nHost: {host}\r\n\r\n",
    "GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n",  # kept alive, then idle past the keep-alive time
])
async def test_the_server_closes_an_http_connection_once_it_is_done_with_it(tmp_path, monkeypatch, request_head):
    import ongridd.daemon

    monkeypatch.setattr(ongridd.daemon, "HTTP_KEEP_ALIVE_S", 1.0)
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        host = d.base_url.removeprefix("http://")
        stream = await trio.open_tcp_stream(host.rsplit(":", 1)[0], int(host.rsplit(":", 1)[1]))
        await stream.send_all(request_head.format(host=host).encode())
        answer = b""
        with trio.fail_after(10):  # the answer, then the server's end of the connection
            while chunk := await stream.receive_some(65536):
                answer += chunk
        assert answer.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")), answer[:80]
        await stream.aclose()


async def test_a_socket_without_hello_that_does_not_read_is_still_closed(tmp_path, monkeypatch, caplog):
    # its replies fill the socket's buffers, so the daemon's close cannot be sent: the TCP socket
    # itself is closed a little after the hello deadline
    monkeypatch.setattr(ws, "HELLO_TIMEOUT_S", 1.0)
    monkeypatch.setattr(ws, "HELLO_ABORT_AFTER_S", 0.5)
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        port = int(d.base_url.rsplit(":", 1)[1])
        sock = await _flood_without_reading(d.base_url, 15)
        with trio.fail_after(15):
            while _live_on(port):
                await trio.sleep(0.05)
        assert any(getattr(r, "ongrid_fields", {}).get("reason") == "no hello, and not reading"
                   for r in caplog.records)
        sock.close()


async def test_a_flooding_client_that_does_not_read_and_resets_leaves_nothing_behind(tmp_path):
    # the daemon's replies block (the client does not read) while its frames fill the app's queue;
    # then the client resets the connection: the failed send must not leave the app waiting on itself
    import struct

    from ongridd.metrics import WS_CLIENTS

    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        port = int(d.base_url.rsplit(":", 1)[1])
        before = WS_CLIENTS._value.get()
        for _ in range(3):
            sock = await _flood_without_reading(d.base_url, 3)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset
        with trio.fail_after(15):
            while _live_on(port) or WS_CLIENTS._value.get() > before:
                await trio.sleep(0.05)
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"


async def _flood_without_reading(base_url: str, for_s: float) -> trio.socket.SocketType:
    """A websocket client that reads the handshake's answer and nothing after it, with a tiny
    receive buffer, and sends frames the daemon answers with large errors (no hello) for up to
    ``for_s`` seconds or until the daemon stops reading or closes the socket.  Returns its socket."""
    from wsproto.events import TextMessage

    stream, client = await raw_chat_socket(base_url, buffer=(socket.SO_RCVBUF, 4096))
    bad = client.send(TextMessage(data=json.dumps({"type": "A" * 60000})))
    with trio.move_on_after(for_s):
        try:
            for _ in range(400):
                await stream.send_all(bad)
        except trio.BrokenResourceError:
            pass  # closed by the daemon
    return stream.socket
