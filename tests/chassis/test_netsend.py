"""Sending without a scheduler pass (``ongridd.netsend``) on real socket pairs: what the
kernel takes at once goes without a checkpoint, the rest through ``send_all``, and errors
are the stream errors ``send_all`` raises."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from ongridd.netsend import send_all_now, write_now


def _pair() -> tuple[trio.SocketStream, socket.socket]:
    ours, theirs = socket.socketpair()
    return trio.SocketStream(trio.socket.from_stdlib_socket(ours)), theirs


async def test_what_the_socket_takes_at_once_goes_without_a_checkpoint():
    stream, peer = _pair()
    async with stream:
        with peer:
            with trio.testing.assert_no_checkpoints():
                assert write_now(stream, b"frame one") == b""
            others_ran = False

            async def other() -> None:
                nonlocal others_ran
                others_ran = True

            async with trio.open_nursery() as nursery:
                nursery.start_soon(other)
                await send_all_now(stream, b" and two")  # a cancel point, but no schedule point
                assert not others_ran
            assert peer.recv(100) == b"frame one and two"


async def test_a_full_send_buffer_leaves_the_rest_to_send_all():
    stream, peer = _pair()
    async with stream:
        with peer:
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            data = bytes(range(256)) * 16_384  # 4 MiB: far more than both buffers
            rest = write_now(stream, data)
            assert 0 < len(rest) < len(data)
            assert bytes(rest) == data[len(data) - len(rest):]
            received = bytearray()

            async def read_all() -> None:
                while len(received) < len(data):
                    await trio.lowlevel.wait_readable(peer)
                    received.extend(peer.recv(1 << 20))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_all)
                with trio.testing.assert_checkpoints():  # the buffer is still full: it waits for room
                    await send_all_now(stream, bytes(rest))
            assert received == data


async def test_a_peer_gone_is_a_broken_stream():
    stream, peer = _pair()
    async with stream:
        peer.close()
        with pytest.raises(trio.BrokenResourceError):
            for _ in range(3):  # the first write may still be taken before the reset
                await send_all_now(stream, b"x" * 65536)


async def test_a_closed_stream_or_one_shut_for_sending_is_a_closed_stream():
    stream, peer = _pair()
    with peer:
        await stream.send_eof()
        assert write_now(stream, b"late") == b"late"  # left to send_all, which refuses it
        with pytest.raises(trio.ClosedResourceError):
            await send_all_now(stream, b"late")
        await stream.aclose()
        assert write_now(stream, b"later") == b"later"
        with pytest.raises(trio.ClosedResourceError):
            await send_all_now(stream, b"later")


async def test_other_streams_go_through_their_own_send_all():
    ours, theirs = trio.testing.memory_stream_pair()
    assert write_now(ours, b"tls or a test") == b"tls or a test"
    await send_all_now(ours, b"tls or a test")
    assert await theirs.receive_some() == b"tls or a test"


async def test_a_cancelled_caller_sends_nothing():
    stream, peer = _pair()
    async with stream:
        with peer:
            with trio.CancelScope() as scope:
                scope.cancel()
                await send_all_now(stream, b"POST /v1/chat/completions")
                raise AssertionError("not cancelled")
            assert scope.cancelled_caught
            peer.setblocking(False)
            with pytest.raises(BlockingIOError):
                peer.recv(100)
