"""A chat-socket message over the size limit (``ws.MAX_MESSAGE_BYTES``) is not
read on: the daemon sends the close (1009, message too big) and ends the
TCP connection, whatever the client keeps sending.  (hypercorn sent the 1009
and then read and buffered the rest for ever: a frame header announcing
2 GiB, then its payload streamed, grew the daemon by as much as was sent,
before any token was checked.)  A frame that does not parse (not UTF-8, a
reserved bit or opcode, an unmasked client frame) fails the connection with
its close code (1007, 1002) before the TCP connection ends."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import httpx2
import pytest
import trio
from rt_helpers import open_daemon, raw_chat_socket

from ongridd.server import connections, ws

MIB = 1024 * 1024
#: what a client tries to send behind the oversized message's start; the daemon must have ended
#: the connection long before
ATTEMPT_BYTES = 64 * MIB
#: what the kernel may take from the client before the daemon's close reaches it: the limit, one read
#: of the server (64 KiB), the client's send buffer (set small below) and the daemon's receive buffer
#: (autotuned by the kernel, a few MiB at most while the daemon does not read)
ACCEPTED_BOUND = 8 * MIB
CHUNK = 64 * 1024
#: the client's send buffer (the kernel doubles it): keeps what the kernel takes from it small
CLIENT_SNDBUF = 64 * 1024


def _frame_head(opcode: int, length: int, *, fin: bool = True) -> bytes:
    """The header of a masked client frame announcing ``length`` payload bytes (mask key 0: the
    payload is sent as it is)."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        head = bytes([first, 0x80 | length])
    elif length < 1 << 16:
        head = bytes([first, 0x80 | 126]) + struct.pack("!H", length)
    else:
        head = bytes([first, 0x80 | 127]) + struct.pack("!Q", length)
    return head + b"\0\0\0\0"


def _one_huge_frame(opcode: int) -> Iterator[bytes]:
    """A frame announcing 1 GiB, then its payload (in chunks)."""
    yield _frame_head(opcode, 1 << 30)
    chunk = b"x" * CHUNK
    while True:
        yield chunk


def _many_fragments() -> Iterator[bytes]:
    """A text message in 16 KiB fragments (a first frame, then continuations) that never ends."""
    piece = b"y" * (16 * 1024)
    yield _frame_head(0x1, len(piece), fin=False) + piece
    continuation = _frame_head(0x0, len(piece), fin=False) + piece
    while True:
        yield continuation


async def _send_until_closed(base_url: str, frames: Iterator[bytes]) -> tuple[int, bool, int | None]:
    """Send ``frames`` on a new chat socket until the daemon ends the connection (or
    ``ATTEMPT_BYTES`` were sent), while reading what the daemon sends.  Returns the bytes the
    kernel accepted, whether the daemon ended the TCP connection (EOF or reset), and the code of
    the close frame it sent (None without one)."""
    from wsproto.events import CloseConnection

    stream, client = await raw_chat_socket(base_url, buffer=(socket.SO_SNDBUF, CLIENT_SNDBUF))
    sent = 0
    ended = False
    code: int | None = None

    async def read() -> None:
        nonlocal ended, code
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):  # a reset
                ended = True
                return
            if not data:
                ended = True
                return
            client.receive_data(data)  # type: ignore[attr-defined]
            for event in client.events():  # type: ignore[attr-defined]
                if isinstance(event, CloseConnection):
                    code = event.code

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            try:
                for data in frames:
                    await stream.send_all(data)
                    sent += len(data)
                    if sent >= ATTEMPT_BYTES:
                        break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the daemon ended the connection
            if sent >= ATTEMPT_BYTES:  # the daemon kept reading: do not wait for an end that will not come
                nursery.cancel_scope.cancel()
            else:
                with trio.fail_after(30):  # a hang guard only: the end has been seen by the writer
                    while not ended:
                        await trio.sleep(0.01)
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()
    return sent, ended, code


def _live_on(port: int) -> int:
    return sum(1 for sock in map(connections._socket_of, list(connections._LIVE))
               if sock is not None and sock.fileno() >= 0 and sock.getsockname()[1] == port)


@pytest.mark.parametrize("frames", [
    pytest.param(lambda: _one_huge_frame(0x1), id="text-frame-announcing-1GiB"),
    pytest.param(lambda: _one_huge_frame(0x2), id="binary-frame-announcing-1GiB"),
    pytest.param(_many_fragments, id="fragments-past-the-limit"),
])
async def test_an_oversized_message_ends_the_connection_unread(tmp_path, caplog, frames):
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        port = int(d.base_url.rsplit(":", 1)[1])
        sent, ended, code = await _send_until_closed(d.base_url, frames())
        assert sent < ACCEPTED_BOUND, f"the daemon read on: the kernel took {sent / MIB:.1f} MiB"
        assert ended, "the daemon did not end the TCP connection"
        assert code == 1009
        assert any(r.getMessage() == "websocket_message_too_big"
                   and getattr(r, "ongrid_fields", {}).get("limit") == ws.MAX_MESSAGE_BYTES for r in caplog.records)
        with trio.fail_after(10):  # nothing of the connection is left in the daemon
            while _live_on(port):
                await trio.sleep(0.05)
        async with httpx2.AsyncClient() as http:
            assert (await http.get(d.base_url + "/healthz")).status_code == 200
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"


async def test_several_oversized_messages_at_once_leave_the_daemon_serving(tmp_path):
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        results: list[tuple[int, bool, int | None]] = []

        async def one(frames: Iterator[bytes]) -> None:
            results.append(await _send_until_closed(d.base_url, frames))

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(one, _one_huge_frame(0x1) if i % 2 else _many_fragments())
        for sent, ended, code in results:
            assert sent < ACCEPTED_BOUND and ended and code == 1009, (sent, ended, code)
        async with httpx2.AsyncClient() as http:
            assert (await http.get(d.base_url + "/healthz")).status_code == 200
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"


@pytest.mark.parametrize("frame,code", [
    pytest.param(_frame_head(0x1, 4) + b"ok\xff\xfe", 1007, id="text-not-utf8"),
    pytest.param(bytes([0x80 | 0x40 | 0x1, 0x80 | 2]) + b"\0\0\0\0" + b"hi", 1002, id="reserved-bit-set"),
    pytest.param(bytes([0x81, 2]) + b"hi", 1002, id="client-frame-not-masked"),
    pytest.param(_frame_head(0x3, 2) + b"hi", 1002, id="reserved-opcode"),
])
async def test_a_frame_that_does_not_parse_fails_the_connection_with_its_close_code(tmp_path, frame, code):
    # RFC 6455 7.1.7: the daemon sends a close frame naming the reason, then ends the TCP connection
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}) as d:
        port = int(d.base_url.rsplit(":", 1)[1])
        sent, ended, got = await _send_until_closed(d.base_url, iter([frame]))
        assert ended and got == code, (ended, got)
        with trio.fail_after(10):
            while _live_on(port):
                await trio.sleep(0.05)
        async with d.ws("after") as c:
            assert (await c.ask("still there?"))["text"] == "hi"


def test_the_oversized_message_fix_is_applied_once_and_fails_loudly_without_its_hook(monkeypatch):
    from hypercorn.protocol import ws_stream

    connections.harden_http_server()
    wrapped = ws_stream.WSStream._handle_events
    assert getattr(wrapped, "_ongrid_bounded", False)
    connections.harden_http_server()  # idempotent: not wrapped twice
    assert ws_stream.WSStream._handle_events is wrapped
    monkeypatch.delattr(ws_stream.WSStream, "_handle_events")
    with pytest.raises(RuntimeError, match="_handle_events"):
        connections._end_websocket_on_oversized_message()



async def test_before_its_hello_a_client_may_send_only_a_small_message(tmp_path, caplog, monkeypatch):
    # with tokens configured, a client is unknown until its hello is accepted: a message over
    # PRE_AUTH_MESSAGE_BYTES ends the connection (1009) without the server holding the full size for it
    monkeypatch.setenv("RT_TEST_TOKENS", "alice:tok-alice-0123456789")
    async with open_daemon(tmp_path, {"default": [{"content": "hi"}]}, server={"tokens_env": "RT_TEST_TOKENS"}) as d:
        big = connections.PRE_AUTH_MESSAGE_BYTES + 1024
        sent, ended, code = await _send_until_closed(d.base_url, iter([_frame_head(0x1, big) + b"z" * big]))
        assert ended and code == 1009
        assert any(r.getMessage() == "websocket_message_too_big" and getattr(r, "ongrid_fields", {}).get("limit")
                   == connections.PRE_AUTH_MESSAGE_BYTES for r in caplog.records)
        async with d.ws("main", token="tok-alice-0123456789") as alice:  # after the hello: the full size
            answer = await alice.ask("x" * 30_000)  # over the first limit, under the text limit
            assert answer.get("text") == "hi", answer
