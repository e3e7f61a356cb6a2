"""The chat socket served in front of the HTTP app: the handshake's origin
check, other websocket paths left to the app, a client that leaves."""

from __future__ import annotations

import json

import trio

import ongridd.server.ws as ws_module
from ongridd.config import Config
from ongridd.server.app import AppServices, serve_app
from ongridd.server.auth import Authenticator
from tests.chassis.asgi_socket import asgi_socket


class RecordingRuntime:
    """The runtime's chat-socket API, recording what the connection asks."""

    def __init__(self) -> None:
        self.released: list[tuple[str, bool]] = []

    async def open_thread(self, *, user_id: str, thread: str, hold: bool) -> tuple[str, bool]:
        return f"session-{thread}", False

    def subscribe(self, session_id: str):
        import contextlib

        @contextlib.contextmanager
        def pair():
            send, receive = trio.open_memory_channel(8)
            with send, receive:
                yield [], receive
        return pair()

    async def release_thread(self, session_id: str, *, created: bool) -> None:
        self.released.append((session_id, created))


def app(tokens: dict[str, str] | None = None, runtime: object = None):
    return serve_app(AppServices(config=Config(), auth=Authenticator(tokens or {}), runtime=runtime))


async def test_a_cross_site_handshake_is_refused_before_it_is_accepted():
    headers = [(b"host", b"127.0.0.1:8080"), (b"origin", b"http://evil.example")]
    async with asgi_socket(app(), headers=headers) as ws:
        event = await ws.event()
    assert event["type"] == "websocket.close"  # before an accept: the server answers HTTP 403


async def test_where_the_server_can_answer_a_refusal_is_an_http_403_with_the_reason():
    headers = [(b"host", b"127.0.0.1:8080"), (b"origin", b"http://evil.example")]
    async with asgi_socket(app(), headers=headers, extensions={"websocket.http.response": {}}) as ws:
        start, body = await ws.event(), await ws.event()
    assert start["type"] == "websocket.http.response.start" and start["status"] == 403
    error = json.loads(body["body"])["error"]
    assert error["code"] == "forbidden" and "cross-origin" in error["message"]


async def test_a_socket_over_http2_is_refused_even_when_the_server_never_sends_connect(monkeypatch):
    # the app must not wait for websocket.connect for ever: a failed HTTP/2 stream may never send it
    monkeypatch.setattr(ws_module, "CONNECT_WAIT_S", 0.2)
    scope = {"type": "websocket", "path": "/ws", "http_version": "2", "headers": [(b"host", b"127.0.0.1")],
             "extensions": {"websocket.http.response": {}}}
    sent: list[dict] = []

    async def never() -> dict:
        await trio.sleep_forever()
        raise AssertionError

    async def send(event: dict) -> None:
        sent.append(event)

    with trio.fail_after(5):
        await app()(scope, never, send)
    assert sent[0]["status"] == 400 and b"HTTP/1.1 only" in sent[1]["body"]


async def test_a_rebinding_host_is_refused_while_no_tokens_are_set():
    async with asgi_socket(app(), headers=[(b"host", b"evil.example")]) as ws:
        assert (await ws.event())["type"] == "websocket.close"
    # with tokens the name is no longer the protection (a token is): the handshake goes on
    async with asgi_socket(app({"tok-0123456789abcdef": "alice"}, RecordingRuntime()),
                           headers=[(b"host", b"ops.example")]) as ws:
        assert (await ws.event())["type"] == "websocket.accept"


async def test_a_websocket_to_another_path_is_left_to_the_http_app():
    async with asgi_socket(app(), path="/wss") as ws:
        event = await ws.event()
    assert event["type"] != "websocket.accept"


async def test_a_client_that_leaves_ends_the_connection_and_releases_its_thread():
    runtime = RecordingRuntime()
    async with asgi_socket(app(runtime=runtime)) as ws:
        await ws.send({"type": "hello", "thread": "t1"})
        assert await ws.frame() == {"type": "session", "session_id": "session-t1", "thread": "t1",
                                    "resumed": False}
    # the context exit sent websocket.disconnect and waited for the app to return
    assert runtime.released == [("session-t1", True)]  # its hello made the thread (not resumed)
