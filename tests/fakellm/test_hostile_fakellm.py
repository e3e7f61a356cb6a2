"""The scripted model against a hostile client: a request body that is not
usable JSON is answered 400 (no step taken), however it is malformed; the
records a long-running server keeps are bounded; a client that keeps sending
during a step's delay is not read beyond a small bound (its pipelined
request is still answered, its close still noticed); running out of file
descriptors pauses accepting instead of spinning, and service resumes."""

from __future__ import annotations

import argparse
import json
import select
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import h11
import httpx2
import pytest
import trio
from test_fakellm_cli import _env, _read_line

from ongridd.fakellm import open_fake_llm
from ongridd.fakellm import server as fake_server

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def post(base_url: str, body: bytes) -> tuple[int, bytes]:
    """POST /v1/chat/completions; (status, body) — (0, b"") when the server closed without answering."""
    parts = urlsplit(base_url)
    assert parts.hostname is not None and parts.port is not None
    stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    conn = h11.Connection(h11.CLIENT)
    data = conn.send(h11.Request(method="POST", target="/v1/chat/completions",
                                 headers=[("host", "t"), ("content-length", str(len(body)))]))
    data = (data or b"") + (conn.send(h11.Data(data=body)) or b"") + (conn.send(h11.EndOfMessage()) or b"")
    status, answer = 0, b""
    async with stream:
        await stream.send_all(data)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:  # the server's EOF before (the end of) an answer
                return status, answer
            if event is h11.NEED_DATA:
                try:
                    conn.receive_data(await stream.receive_some(65536))
                except trio.BrokenResourceError:
                    return status, answer
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                answer += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status, answer


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"messages": ' + b"[" * 100_000],
                         ids=["array nesting bomb", "nesting bomb inside messages"])
async def test_a_json_nesting_bomb_is_answered_400_without_taking_a_step(body):
    async with open_fake_llm({"default": [{"content": "only step"}]}) as fake:
        status, answer = await post(fake.base_url, body)
        assert status == 400, "the server closed the connection without answering"
        assert "messages" in json.loads(answer)["error"]["message"]
        assert fake.cursor("default") == 0


# -- the records kept --------------------------------------------------------


async def _post_many(base_url: str, count: int, body: dict[str, Any] = CHAT) -> list[int]:
    async with httpx2.AsyncClient(trust_env=False) as http:
        return [(await http.post(base_url + "/chat/completions", json=body)).status_code for _ in range(count)]


async def test_a_fakellm_built_directly_keeps_only_the_most_recent_records():
    fake = fake_server.FakeLLM(fake_server.coerce_script({"default": [{"content": "x"}] * 150}))
    assert fake.keep_requests == fake_server.KEEP_REQUESTS
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(fake_server.serve_fake_llm, fake)
        assert await _post_many(base_url, 150) == [200] * 150
        await fake.wait_requests(150)  # counts every call, kept or not
        nursery.cancel_scope.cancel()
    assert fake.received == 150
    assert [r.step for r in fake.requests] == list(range(150 - fake_server.KEEP_REQUESTS, 150))


async def test_the_records_kept_are_bounded_in_bytes_too(monkeypatch):
    monkeypatch.setattr(fake_server, "KEEP_REQUEST_BYTES", 10_000)
    big = {"model": "m", "messages": [{"role": "user", "content": "y" * 3000}]}
    fake = fake_server.FakeLLM(fake_server.coerce_script({"default": [{"content": "x"}] * 10}))
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(fake_server.serve_fake_llm, fake)
        assert await _post_many(base_url, 10, big) == [200] * 10
        nursery.cancel_scope.cancel()
    assert [r.step for r in fake.requests] == [7, 8, 9]  # 3 x ~3 KB fit in 10,000 bytes, 4 do not
    assert sum(r.body_bytes for r in fake.requests) <= 10_000


async def test_keep_requests_zero_keeps_none_and_open_fake_llm_keeps_all():
    fake = fake_server.FakeLLM(fake_server.coerce_script({"default": [{"content": "x"}] * 3}), keep_requests=0)
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(fake_server.serve_fake_llm, fake)
        assert await _post_many(base_url, 3) == [200] * 3
        nursery.cancel_scope.cancel()
    assert (fake.requests, fake.received) == ([], 3)
    async with open_fake_llm({"default": [{"content": "x"}] * 150}) as everything:
        assert await _post_many(everything.base_url, 150) == [200] * 150
        assert [r.step for r in everything.requests] == list(range(150))


def test_the_cli_keeps_a_bounded_number_of_records(tmp_path, monkeypatch):
    from ongridd.cli import fakellm as cli

    script = tmp_path / "s.yaml"
    script.write_text("default:\n  - content: x\n", encoding="utf-8")
    served: list[Any] = []
    monkeypatch.setattr(trio, "run", lambda _fn, fake, *_args: served.append(fake) or 0)
    monkeypatch.setattr("ongridd.logs.configure", lambda *a, **k: None)
    assert cli.run(argparse.Namespace(script=str(script), listen="127.0.0.1:0", record=None)) == 0
    assert [f.keep_requests for f in served] == [fake_server.KEEP_REQUESTS]


# -- reading during a delay --------------------------------------------------


class CountingConnection(h11.Connection):
    """An h11 connection that counts the bytes fed to it, and how many it had
    been fed when each exchange ended, its answer sent (server side only; the
    server renders an answer before its step's delay, so the moment it is
    rendered says nothing about what was read during the delay)."""

    servers: ClassVar[list[CountingConnection]] = []

    def __init__(self, our_role: Any, **kwargs: Any) -> None:
        super().__init__(our_role, **kwargs)
        self.fed = 0
        self.fed_at_answer: list[int] = []
        if our_role is h11.SERVER:
            CountingConnection.servers.append(self)

    def receive_data(self, data: bytes) -> None:
        self.fed += len(data)
        super().receive_data(data)

    def start_next_cycle(self) -> None:
        if self.our_role is h11.SERVER:
            self.fed_at_answer.append(self.fed)
        super().start_next_cycle()


def _request(conn: h11.Connection, body: bytes) -> bytes:
    parts = [conn.send(h11.Request(method="POST", target="/v1/chat/completions",
                                   headers=[("host", "t"), ("content-length", str(len(body)))])),
             conn.send(h11.Data(data=body)), conn.send(h11.EndOfMessage())]
    return b"".join(p or b"" for p in parts)


async def _read_answers(stream: trio.SocketStream, count: int) -> list[bytes]:
    """The bodies of the next ``count`` answers on ``stream`` (each must be a 200)."""
    answers: list[bytes] = []
    leftover = b""
    with trio.fail_after(60):
        while len(answers) < count:
            reader = h11.Connection(h11.CLIENT)  # one per answer: h11 parses one exchange at a time
            reader.send(h11.Request(method="POST", target="/", headers=[("host", "t"), ("content-length", "0")]))
            reader.send(h11.EndOfMessage())
            if leftover:  # b"" would mean EOF to h11
                reader.receive_data(leftover)
            body = b""
            while True:
                event = reader.next_event()
                if event is h11.NEED_DATA:
                    reader.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    assert event.status_code == 200
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
            answers.append(body)
            leftover = reader.trailing_data[0]
    return answers


async def test_a_client_sending_50_mb_during_a_delay_is_not_read_until_the_answer(monkeypatch):
    monkeypatch.setattr(CountingConnection, "servers", [])
    monkeypatch.setattr(h11, "Connection", CountingConnection)
    second = json.dumps({"model": "m", "messages": [{"role": "user", "content": "z" * 50_000_000}]}).encode()
    script = {"default": [{"delay_s": 2, "content": "late"}, {"content": "next"}]}
    async with open_fake_llm(script) as fake:
        parts = urlsplit(fake.base_url)
        assert parts.hostname is not None and parts.port is not None
        stream = await trio.open_tcp_stream(parts.hostname, parts.port)
        # h11 does not pipeline: each request is rendered by its own client connection
        data = _request(h11.Connection(h11.CLIENT), json.dumps(CHAT).encode())
        data += _request(h11.Connection(h11.CLIENT), second)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, data)
            answers = await _read_answers(stream, 2)
        assert [json.loads(a)["choices"][0]["message"]["content"] for a in answers] == ["late", "next"]
        assert [(r.step, r.status) for r in fake.requests] == [(0, 200), (1, 200)]
    [server] = CountingConnection.servers
    first_answer_fed = server.fed_at_answer[0]
    print(f"bytes read by the server before answering the delayed call: {first_answer_fed}")
    assert first_answer_fed <= fake_server.PIPELINE_BYTES + 2 * 65536  # not the 50 MB the client pushed
    assert server.fed >= len(second)  # the pipelined request was read once its turn came


@pytest.mark.skipif(not hasattr(select, "EPOLLRDHUP"), reason="noticing a close behind unread bytes needs epoll")
async def test_a_client_that_leaves_behind_unread_bytes_during_a_delay_is_noticed(monkeypatch, tmp_path):
    monkeypatch.setattr(fake_server, "PIPELINE_BYTES", 1024)
    record = tmp_path / "requests.jsonl"
    fake = fake_server.FakeLLM(
        fake_server.coerce_script({"default": [{"delay_s": 0.5, "content": "late"}, {"content": "next"}]}),
        record=record,
    )
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(fake_server.serve_fake_llm, fake)
        parts = urlsplit(base_url)
        assert parts.hostname is not None and parts.port is not None
        stream = await trio.open_tcp_stream(parts.hostname, parts.port)
        await stream.send_all(_request(h11.Connection(h11.CLIENT), json.dumps(CHAT).encode()))
        with trio.fail_after(10):
            await fake.wait_requests(1)
        await stream.send_all(b"x" * 32 * 1024)  # more than the server reads while the call is pending
        await stream.aclose()
        await trio.sleep(1.5)  # well past the delay: an answer would have been recorded by now
        assert (fake.requests[0].step, fake.requests[0].status) == (0, 0)
        assert await _post_many(base_url, 1) == [200]
        nursery.cancel_scope.cancel()
    fake.close()
    assert [json.loads(line)["step"] for line in record.read_text().splitlines()] == [1]


# -- out of file descriptors -------------------------------------------------


def _cli(script: Path, soft: int, hard: int) -> list[str]:
    entry = (f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
             "from ongridd.cli import ongrid_main; ongrid_main()")
    return [sys.executable, "-c", entry, "fake-llm", "--script", str(script), "--listen", "127.0.0.1:0"]


async def test_the_cli_raises_the_open_files_limit_and_backs_off_when_out_of_them(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("default:\n  - content: x\n", encoding="utf-8")
    # soft 32 -> raised to the hard limit, 64: a few more than 40 connections exhaust it
    proc = await trio.lowlevel.open_process(_cli(script, 32, 64), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            env=_env())
    stderr = bytearray()

    async def drain() -> None:
        assert proc.stderr is not None
        while piece := await proc.stderr.receive_some(65536):
            stderr.extend(piece)

    def lines(event: str) -> list[dict[str, Any]]:
        found = []
        for line in bytes(stderr).decode(errors="replace").splitlines():
            if line.startswith("{") and f'"{event}"' in line:
                found.append(json.loads(line))
        return found

    idle: list[trio.SocketStream] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            with trio.fail_after(30):
                base_url = (await _read_line(proc.stdout)).decode().strip()
                parts = urlsplit(base_url)
                assert parts.hostname is not None and parts.port is not None
                for _ in range(80):  # more connections than descriptors: the rest wait in the backlog
                    idle.append(await trio.open_tcp_stream(parts.hostname, parts.port))
                while not lines("fake_llm_accept_failed"):
                    await trio.sleep(0.05)
                await trio.sleep(1.0)  # accepting keeps failing meanwhile: ~10 retries, at most one more line
                failed = lines("fake_llm_accept_failed")
                assert 1 <= len(failed) <= 2, failed
                assert failed[0]["error"] == "EMFILE" and failed[0]["open_files_limit"] == 64
                last = idle.pop()  # one of the connections still waiting to be accepted
                await last.send_all(_request(h11.Connection(h11.CLIENT), json.dumps(CHAT).encode()))
                for stream in idle:
                    await stream.aclose()
                idle.clear()
                answer = b""
                while b"ongrid-scripted-model" not in answer:  # served once descriptors are free again
                    piece = await last.receive_some(65536)
                    assert piece, "the server closed the connection without answering"
                    answer += piece
                assert answer.startswith(b"HTTP/1.1 200")
                await last.aclose()
                proc.terminate()
                assert await proc.wait() == 0
    finally:
        for stream in idle:
            await stream.aclose()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert [x["soft_limit"] for x in lines("fake_llm_open_files_limit")] == [64]
