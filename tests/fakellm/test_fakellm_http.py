"""The scripted model's HTTP layer (an h11 server on Trio): keep-alive and
pipelining, framing of both answer forms, 404/405/413/431/400 answers,
a client leaving during a step's delay, the delay counted from the request
head, the log and record lines following the send, IPv6, and curl as a
client."""

from __future__ import annotations

import json
import shutil
import subprocess
from urllib.parse import urlsplit

import h11
import httpx2
import pytest
import trio
import trio.testing

from tests.conftest import ipv6_loopback

from ongridd.fakellm import open_fake_llm
from ongridd.fakellm import server as fake_server

USER = [{"role": "user", "content": "what is filling the disk?"}]
CHAT = {"model": "m", "messages": USER}


def _address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def request_bytes(conn: h11.Connection, method: str, target: str, body: bytes = b"",
                  headers: list[tuple[str, str]] | None = None) -> bytes:
    """A whole request as ``conn`` (an h11 client) puts it on the wire."""
    all_headers = [("host", "test"), ("content-length", str(len(body))), *(headers or [])]
    events: list[h11.Event] = [h11.Request(method=method, target=target, headers=all_headers)]
    if body:
        events.append(h11.Data(data=body))
    events.append(h11.EndOfMessage())
    return b"".join(conn.send(e) or b"" for e in events)


class RawClient:
    """One TCP connection driven by an h11 client: several requests on it in
    turn, so a test sees whether the server keeps it open."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    async def request(self, method: str, target: str, body: bytes = b"",
                      headers: list[tuple[str, str]] | None = None) -> tuple[h11.Response, bytes]:
        await self.stream.send_all(request_bytes(self.conn, method, target, body, headers))
        return await self.response()

    async def response(self) -> tuple[h11.Response, bytes]:
        head: h11.Response | None = None
        body = b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(await self.stream.receive_some(65536))
            elif type(event) is h11.Response:
                head = event
            elif type(event) is h11.Data:
                body += event.data
            elif type(event) is h11.EndOfMessage:
                assert head is not None
                if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                    self.conn.start_next_cycle()
                return head, body
            elif type(event) is h11.ConnectionClosed:
                raise AssertionError("the server closed the connection without an answer")


async def raw_client(base_url: str) -> RawClient:
    host, port = _address(base_url)
    return RawClient(await trio.open_tcp_stream(host, port))


def header(response: h11.Response, name: str) -> str | None:
    for key, value in response.headers:
        if key == name.encode():
            return value.decode()
    return None


def sse_data(body: bytes) -> list[str]:
    return [part[len("data: "):] for part in body.decode().split("\n\n") if part.startswith("data: ")]


async def test_one_connection_serves_every_kind_of_request_in_turn():
    script = {"default": [{"content": "one"}, {"content": "two " * 10}, {"http_status": 503}, {"content": "four"}]}
    async with open_fake_llm(script) as fake:
        client = await raw_client(fake.base_url)
        async with client.stream:
            plain, plain_body = await client.request("POST", "/v1/chat/completions", json.dumps(CHAT).encode())
            streamed, streamed_body = await client.request(
                "POST", "/v1/chat/completions", json.dumps({**CHAT, "stream": True}).encode())
            models, models_body = await client.request("GET", "/v1/models")
            failed, failed_body = await client.request("POST", "/v1/chat/completions", json.dumps(CHAT).encode())
            missing, _ = await client.request("POST", "/v1/nothing-here", b'{"x": 1}')
            last, last_body = await client.request("POST", "/v1/chat/completions", json.dumps(CHAT).encode())
    assert plain.status_code == 200 and header(plain, "content-type") == "application/json"
    assert header(plain, "content-length") == str(len(plain_body))
    assert json.loads(plain_body)["choices"][0]["message"]["content"] == "one"
    # a stream is chunked (no Content-Length) and its SSE events are whole
    assert streamed.status_code == 200 and header(streamed, "transfer-encoding") == "chunked"
    assert header(streamed, "content-type") == "text/event-stream" and header(streamed, "content-length") is None
    assert header(streamed, "cache-control") == "no-cache"
    events = sse_data(streamed_body)
    assert events[-1] == "[DONE]"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in map(json.loads, events[:-1]))
    assert text == "two " * 10
    assert models.status_code == 200 and json.loads(models_body)["data"][0]["id"] == fake_server.MODEL_ID
    assert failed.status_code == 503 and json.loads(failed_body)["error"]["type"] == "server_error"
    assert missing.status_code == 404
    assert last.status_code == 200 and json.loads(last_body)["choices"][0]["message"]["content"] == "four"
    assert [r.status for r in fake.requests] == [200, 200, 503, 200]


async def test_pipelined_requests_are_answered_in_order():
    script = {"default": [{"content": "first", "delay_s": 0.05}, {"content": "second"}]}
    body = json.dumps(CHAT).encode()
    async with open_fake_llm(script) as fake:
        client = await raw_client(fake.base_url)
        async with client.stream:
            first = request_bytes(client.conn, "POST", "/v1/chat/completions", body)
            # h11 as a client does not pipeline: the second request is the same bytes from a fresh client
            second = request_bytes(h11.Connection(h11.CLIENT), "POST", "/v1/chat/completions", body)
            await client.stream.send_all(first + second)  # both before any answer
            first_head, first_body = await client.response()
            request_bytes(client.conn, "POST", "/v1/chat/completions", body)  # already sent: only the state
            second_head, second_body = await client.response()
    assert (first_head.status_code, second_head.status_code) == (200, 200)
    assert json.loads(first_body)["choices"][0]["message"]["content"] == "first"
    assert json.loads(second_body)["choices"][0]["message"]["content"] == "second"


async def test_unknown_paths_and_methods():
    async with open_fake_llm({"default": [{"content": "x"}]}) as fake, httpx2.AsyncClient(trust_env=False) as http:
        missing = await http.get(fake.base_url + "/completions")
        wrong_get = await http.get(fake.base_url + "/chat/completions")
        wrong_post = await http.post(fake.base_url + "/models", json={})
        options = await http.options(fake.base_url + "/chat/completions")
        head = await http.head(fake.base_url + "/models")
        with_query = await http.get(fake.base_url + "/models?limit=5")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert "/v1/completions" in missing.json()["error"]["message"]
    assert wrong_get.status_code == 405 and wrong_get.headers["allow"] == "OPTIONS, POST"
    assert "GET" in wrong_get.json()["error"]["message"]
    assert wrong_post.status_code == 405 and wrong_post.headers["allow"] == "GET, HEAD, OPTIONS"
    assert options.status_code == 200 and options.headers["allow"] == "OPTIONS, POST"
    assert head.status_code == 200 and head.content == b""
    assert with_query.status_code == 200 and with_query.json()["data"][0]["id"] == fake_server.MODEL_ID
    assert fake.requests == [] and fake.cursor("default") == 0


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_limit_is_413_and_takes_no_step(monkeypatch, chunked):
    monkeypatch.setattr(fake_server, "MAX_BODY_BYTES", 4096)
    big = json.dumps({**CHAT, "padding": "x" * 10_000}).encode()

    async def pieces():
        for i in range(0, len(big), 1000):
            yield big[i:i + 1000]

    async with open_fake_llm({"default": [{"content": "x"}]}) as fake, httpx2.AsyncClient(trust_env=False) as http:
        r = await http.post(fake.base_url + "/chat/completions", content=pieces() if chunked else big)
        after = await http.post(fake.base_url + "/chat/completions", json=CHAT)
    assert r.status_code == 413 and "4096" in r.json()["error"]["message"]
    assert after.status_code == 200
    assert [(x.step, x.status) for x in fake.requests] == [(0, 200)]


async def test_a_head_over_16_kib_is_431_and_a_malformed_request_400():
    async with open_fake_llm({"default": [{"content": "x"}]}) as fake, httpx2.AsyncClient(trust_env=False) as http:
        r = await http.post(fake.base_url + "/chat/completions", json=CHAT, headers={"X-Big": "y" * 20_000})
        host, port = _address(fake.base_url)
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(b"NOT AN HTTP REQUEST\r\n\r\n")
            reply = b""
            while chunk := await stream.receive_some(65536):
                reply += chunk
        ok = await http.post(fake.base_url + "/chat/completions", json=CHAT)
    assert r.status_code == 431 and r.json()["error"]["message"] == "the request head is too large"
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert ok.status_code == 200 and len(fake.requests) == 1


async def test_connection_close_is_honoured():
    async with open_fake_llm({"default": [{"content": "x"}]}) as fake:
        client = await raw_client(fake.base_url)
        async with client.stream:
            head, _ = await client.request("POST", "/v1/chat/completions", json.dumps(CHAT).encode(),
                                           headers=[("connection", "close")])
            assert head.status_code == 200 and header(head, "connection") == "close"
            assert await client.stream.receive_some(10) == b""  # the server closed it after the answer


async def test_a_client_that_leaves_during_the_delay_gets_no_answer_recorded(tmp_path):
    record = tmp_path / "requests.jsonl"
    fake = fake_server.FakeLLM(
        fake_server.coerce_script({"default": [{"delay_s": 0.2, "content": "late"}, {"content": "next"}]}),
        record=record,
    )
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(fake_server.serve_fake_llm, fake)
        client = await raw_client(base_url)
        await client.stream.send_all(request_bytes(client.conn, "POST", "/v1/chat/completions",
                                                   json.dumps(CHAT).encode()))
        with trio.fail_after(10):
            await fake.wait_requests(1)
        await client.stream.aclose()
        await trio.sleep(0.6)  # well past the delay: an answer would have been recorded by now
        assert (fake.requests[0].step, fake.requests[0].status) == (0, 0)
        async with httpx2.AsyncClient(trust_env=False) as http:
            r = await http.post(base_url + "/chat/completions", json=CHAT)
        assert r.json()["choices"][0]["message"]["content"] == "next"
        nursery.cancel_scope.cancel()
    fake.close()
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(x["step"], x["status"]) for x in lines] == [(1, 200)]


async def test_the_delay_counts_from_the_request_head_not_from_the_end_of_its_body(mock_clock):
    # the clock only moves when the test jumps it: no real time is measured
    script = {"default": [{"delay_s": 0.5, "content": "late"}]}
    body = json.dumps(CHAT).encode()
    async with open_fake_llm(script) as fake:
        client = await raw_client(fake.base_url)
        async with client.stream:
            await client.stream.send_all(client.conn.send(h11.Request(
                method="POST", target="/v1/chat/completions",
                headers=[("host", "test"), ("content-length", str(len(body))), ("expect", "100-continue")])) or b"")
            while type(event := client.conn.next_event()) is not h11.InformationalResponse:  # the head was parsed
                assert event is h11.NEED_DATA
                client.conn.receive_data(await client.stream.receive_some(65536))
            mock_clock.jump(0.3)  # the body comes 0.3 s after the head
            await client.stream.send_all(b"".join(client.conn.send(e) or b""
                                                  for e in (h11.Data(data=body), h11.EndOfMessage())))
            await fake.wait_requests(1)
            mock_clock.jump(0.3)  # 0.6 s after the head: past the 0.5 s delay, short of 0.3 + 0.5 s
            await trio.testing.wait_all_tasks_blocked()
            assert fake.requests[0].status == 200  # answered (0: still delaying)
            head, answer = await client.response()
    assert head.status_code == 200 and json.loads(answer)["choices"][0]["message"]["content"] == "late"


@pytest.mark.parametrize("delay_s", [0, 0.05])
async def test_the_call_is_logged_and_recorded_after_its_answer_was_sent(monkeypatch, tmp_path, delay_s):
    happened: list[str] = []
    send_all = trio.SocketStream.send_all

    async def sending(self: trio.SocketStream, data: bytes) -> None:
        await send_all(self, data)
        if bytes(data).startswith(b"HTTP/1.1 200 "):
            happened.append("sent")

    write_record = fake_server.FakeLLM._write_record
    monkeypatch.setattr(trio.SocketStream, "send_all", sending)
    monkeypatch.setattr(fake_server.log, "info", lambda event, **fields: happened.append(event))
    monkeypatch.setattr(fake_server.FakeLLM, "_write_record",
                        lambda self, record: (happened.append("record"), write_record(self, record)))
    record = tmp_path / "requests.jsonl"
    fake = fake_server.FakeLLM(fake_server.coerce_script({"default": [{"delay_s": delay_s, "content": "x"}]}),
                               record=record)
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(fake.serve)
        happened.clear()  # the "listening" line
        client = await raw_client(base_url)
        async with client.stream:
            head, _ = await client.request("POST", "/v1/chat/completions", json.dumps(CHAT).encode())
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    fake.close()
    assert head.status_code == 200
    assert happened == ["sent", "fake_llm_call", "record"]
    assert [(x["step"], x["status"]) for x in map(json.loads, record.read_text().splitlines())] == [(0, 200)]


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
async def test_ipv6_listen_address():
    async with open_fake_llm({"default": [{"content": "v6"}]}, host="::1") as fake, \
            httpx2.AsyncClient(trust_env=False) as http:
        assert fake.base_url is not None and fake.base_url.startswith("http://[::1]:")
        r = await http.post(fake.base_url + "/chat/completions", json=CHAT)
    assert r.json()["choices"][0]["message"]["content"] == "v6"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_reads_both_forms_and_sends_a_large_body():
    script = {"default": [{"content": "streamed to curl"}, {"content": "plain to curl"}]}
    # over 1 MiB: curl asks "Expect: 100-continue" first
    large = json.dumps({**CHAT, "messages": [{"role": "user", "content": "z" * (2 * 1024 * 1024)}]})

    def curl(url: str, data: str) -> str:
        out = subprocess.run(
            ["curl", "-sS", "--fail-with-body", "-N", "-H", "Content-Type: application/json",
             "-H", "X-Ongrid-Session: curl", "--data-binary", "@-", url],
            input=data, capture_output=True, text=True, timeout=30, check=True,
        )
        return out.stdout

    async with open_fake_llm(script) as fake:
        url = fake.base_url + "/chat/completions"
        streamed = await trio.to_thread.run_sync(curl, url, json.dumps({**CHAT, "stream": True}))
        plain = await trio.to_thread.run_sync(curl, url, large)
    events = sse_data(streamed.encode())
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]) == \
        "streamed to curl"
    assert json.loads(plain)["choices"][0]["message"]["content"] == "plain to curl"
    assert len(fake.requests[1].body["messages"][0]["content"]) == 2 * 1024 * 1024


async def test_a_malformed_chunked_body_is_400_and_the_server_goes_on():
    async with open_fake_llm({"default": [{"content": "x"}]}) as fake:
        host, port = _address(fake.base_url)
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n"
                                  b"\r\nnot-a-chunk-size\r\n")
            reply = b""
            while chunk := await stream.receive_some(65536):
                reply += chunk
        async with httpx2.AsyncClient(trust_env=False) as http:
            ok = await http.post(fake.base_url + "/chat/completions", json=CHAT)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"malformed HTTP request" in reply
    assert ok.status_code == 200 and [r.step for r in fake.requests] == [0]
