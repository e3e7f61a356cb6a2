"""The chat socket's frame layer (``ongridd.server.directws.DirectSocket``) over an in-memory
stream: what it keeps of a message, and a client that goes away while it answers."""

from __future__ import annotations

import tracemalloc

import trio
import trio.testing
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, Ping, TextMessage

from ongridd.server.directws import DirectSocket, _Handshake


def _socket(stream) -> DirectSocket:
    return DirectSocket(stream, {"client": ("127.0.0.1", 1)}, _Handshake([], b"", b"key", b""), 256 * 1024)


async def _received_with_peak(wire: bytes) -> tuple[str | bytes | None, int]:
    """The first message a socket receives from ``wire`` (client frames), and the peak of the
    memory allocated while it did (bytes, tracemalloc)."""
    server_end, client_end = trio.testing.memory_stream_pair()
    socket = _socket(server_end)
    await socket.accept()
    await client_end.send_all(wire)
    tracemalloc.start()
    try:
        message = await socket.receive()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return message, peak


async def test_a_message_in_many_small_pieces_holds_no_more_than_its_payload():
    client = Connection(ConnectionType.CLIENT)
    pieces = 16 * 1024 - 1  # just under the limit before a hello: 16 KiB
    wire = b"".join(client.send(BytesMessage(data=b"x", message_finished=False)) for _ in range(pieces))
    wire += client.send(BytesMessage(data=b"y", message_finished=True))
    message, peak = await _received_with_peak(wire)
    assert message == b"x" * pieces + b"y"
    # the payload (16 KiB) and one read of the stream (at most 64 KiB, the wire being 112 KiB) with
    # its parse; a list of the pieces alone was over 600 KiB
    assert peak < 400 * 1024, peak


async def test_empty_fragments_do_not_add_up():
    client = Connection(ConnectionType.CLIENT)
    wire = client.send(TextMessage(data='{"type":', message_finished=False))
    wire += b"".join(client.send(TextMessage(data="", message_finished=False)) for _ in range(50_000))
    wire += client.send(TextMessage(data='"hello"}', message_finished=True))
    message, peak = await _received_with_peak(wire)
    assert message == '{"type":"hello"}'
    assert peak < 300 * 1024, peak


async def test_a_client_gone_while_its_ping_is_answered_is_a_client_gone():
    server_end, client_end = trio.testing.memory_stream_pair()
    client = Connection(ConnectionType.CLIENT)
    socket = _socket(server_end)
    await socket.accept()
    await client_end.send_all(client.send(Ping(payload=b"still there?")))
    await client_end.aclose()  # gone: the pong cannot be sent
    assert await socket.receive() is None
    assert socket.closed


async def test_a_client_gone_before_its_handshake_is_answered_is_a_client_gone():
    server_end, client_end = trio.testing.memory_stream_pair()
    await client_end.aclose()
    socket = _socket(server_end)
    await socket.accept()  # the 101 cannot be sent: no error, the connection is over
    assert await socket.receive() is None
    server_end, client_end = trio.testing.memory_stream_pair()
    await client_end.aclose()
    refused = _socket(server_end)
    await refused.refuse(403, "forbidden", "another site")
    assert refused.closed


async def test_several_messages_go_in_one_write_and_arrive_in_order():
    server_end, client_end = trio.testing.memory_stream_pair()
    socket = _socket(server_end)
    await socket.accept()
    await client_end.receive_some()  # the 101
    writes = 0
    original = server_end.send_stream.send_all_hook

    async def count() -> None:
        nonlocal writes
        writes += 1
        if original is not None:
            await original()

    server_end.send_stream.send_all_hook = count
    await socket.send_many(["one", "two", '{"type": "final"}'])
    assert writes == 1
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(await client_end.receive_some())
    assert [event.data for event in client.events()] == ["one", "two", '{"type": "final"}']


async def _turns_of_another_task_while(work) -> int:
    """How many times another runnable task got to run while ``work()`` ran."""
    ran = 0
    done = False

    async def other() -> None:
        nonlocal ran
        while not done:
            ran += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.lowlevel.checkpoint()  # it has started
        before = ran
        await work()
        done = True
    return ran - before


def _socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """Two ends of a real socket pair (a DirectSocket writes to a real socket without yielding)."""
    import socket as stdlib_socket

    a, b = stdlib_socket.socketpair()
    return (trio.SocketStream(trio.socket.from_stdlib_socket(a)), trio.SocketStream(trio.socket.from_stdlib_socket(b)))


async def _accepted_over_a_socket_pair() -> tuple[DirectSocket, trio.SocketStream, Connection]:
    """A socket accepted on one end of a real socket pair; the other end and a client's frame layer."""
    server_end, client_end = _socket_pair()
    socket = _socket(server_end)
    await socket.accept()
    return socket, client_end, Connection(ConnectionType.CLIENT)


async def test_messages_read_together_each_let_other_tasks_run():
    # a client's frames arriving in one read are answered one by one by writes that need not
    # yield: without a yield per message one read of small frames would hold the event loop
    socket, client_end, client = await _accepted_over_a_socket_pair()
    await client_end.send_all(b"".join(client.send(TextMessage(data=f"m{i}")) for i in range(200)))

    async def receive_all() -> None:
        for i in range(200):
            assert await socket.receive() == f"m{i}"

    assert await _turns_of_another_task_while(receive_all) >= 190


async def test_pings_read_together_each_let_other_tasks_run():
    socket, client_end, client = await _accepted_over_a_socket_pair()
    wire = b"".join(client.send(Ping(payload=b"%d" % i)) for i in range(200))
    await client_end.send_all(wire + client.send(TextMessage(data="after the pings")))

    async def receive_one() -> None:
        assert await socket.receive() == "after the pings"

    assert await _turns_of_another_task_while(receive_one) >= 190


async def test_pongs_and_empty_fragments_read_together_let_other_tasks_run():
    from wsproto.events import Pong

    socket, client_end, client = await _accepted_over_a_socket_pair()
    wire = b"".join(client.send(Pong(payload=b"")) for _ in range(6400))
    wire += client.send(TextMessage(data="", message_finished=False))
    wire += b"".join(client.send(TextMessage(data="", message_finished=False)) for _ in range(6400))
    wire += client.send(TextMessage(data="end", message_finished=True))

    async def send_and_receive() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client_end.send_all, wire)
            assert await socket.receive() == "end"

    # one yield per 64 frames at least: 12,800 frames
    assert await _turns_of_another_task_while(send_and_receive) >= 150
