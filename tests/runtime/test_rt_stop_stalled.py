"""SIGTERM while a chat-socket client has stopped reading: the daemon still
stops within its bound (a send to that client cannot hold the stop)."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import trio
from rt_helpers import check_invariants, prepare
from test_rt_process import serve, write_config
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from ongridd.fakellm import open_fake_llm

#: an answer far larger than a loopback socket's buffers (client receive + server send)
BIG = 12 * 1024 * 1024


async def _stalled_client(url: str) -> socket.socket:
    """A websocket client that sends a turn and then never reads: its receive
    buffer is tiny, so the server's sends to it block once the buffers fill."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
    await stream.socket.connect((host, int(port)))
    ws = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(ws.send(Request(host=f"{host}:{port}", target="/ws")))
    while not any(isinstance(e, AcceptConnection) for e in ws.events()):
        data = await stream.receive_some(4096)
        assert data, "the daemon closed the socket during the handshake"
        ws.receive_data(data)
    await stream.send_all(ws.send(TextMessage(json.dumps({"type": "hello", "thread": "stalled"}))))
    await stream.send_all(ws.send(TextMessage(json.dumps({"type": "user_message", "text": "say a lot"}))))
    return sock


async def test_sigterm_while_a_client_does_not_read_still_stops(tmp_path):
    async with open_fake_llm({"default": [{"content": "x" * BIG}]}) as fake:
        mapping = prepare(tmp_path)
        mapping["llm"]["base_url"] = fake.base_url
        db = Path(mapping["state_dir"]) / "ongrid.db"
        async with serve(write_config(tmp_path, mapping)) as sp:
            sock = await _stalled_client(sp.url)
            with trio.fail_after(30):
                while not any(e.get("event") == "turn_end" for e in sp.logs):
                    await trio.sleep(0.1)
            await trio.sleep(1)  # the answer's frames are now stuck in the socket's buffers
            sp.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                code = await sp.proc.wait()
            sock.close()
            assert code == 0
            events = [e.get("event") for e in sp.logs]
            assert "daemon_stopped" in events, events[-10:]
            (closed,) = [e for e in sp.logs if e.get("event") == "connection_closed_at_stop"]
            assert closed["peer"].startswith("127.0.0.1:")
    check_invariants(db, stopped=True)
