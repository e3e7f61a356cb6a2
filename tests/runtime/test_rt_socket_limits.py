"""Chat-socket connections that hold a slot without being a client: hellos
refused again and again, a socket that never says hello, a peer that
vanished (TCP keepalive on every accepted connection)."""

from __future__ import annotations

import socket

import pytest
import trio
from rt_helpers import open_daemon
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
