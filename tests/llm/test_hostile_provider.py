"""OpenAIProvider against a broken or hostile model server: whatever the
server sends, a call ends in a ProviderError (or a completion that really is
one), never another exception; the API key never appears in an error; a
response the client did not ask for never answers a later request."""

from __future__ import annotations

import contextlib
import gzip
import json
from typing import Any, cast

import pytest
import trio
from test_openai_provider import raw_server as plain_raw_server
from test_openai_provider import read_request

from ongridd.errors import ProviderError
from ongridd.llm.assemble import MAX_ANSWER_CHARS
from ongridd.llm.openai_provider import MAX_BODY_BYTES, OpenAIProvider
from ongridd.llm.types import Completion, Message, ModelRequest, TextDelta

KEY = "sk-hostile-0123456789abcdefghijABCDEFGHIJ"
USER = (Message(role="user", content="hi"),)


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse_event(data: bytes) -> bytes:
    return chunked(b"data: " + data + b"\n\n")


def delta(content: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}).encode()


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def sse_answer(text: str) -> bytes:
    return SSE_HEAD + sse_event(delta(text)) + END


def json_answer(body: bytes, status: bytes = b"200 OK") -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
            + body)


def completion_json(text: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}]}).encode()


def raw_server(handler):
    """test_openai_provider's raw server, with a client that hangs up not failing the handler."""

    async def guarded(stream):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await handler(stream)

    return plain_raw_server(guarded)


def answering(payload: bytes):
    async def handler(stream):
        while await read_request(stream):
            await stream.send_all(payload)
    return handler


def provider(url: str, **kw) -> OpenAIProvider:
    return OpenAIProvider(url, kw.pop("api_key", KEY), kw.pop("model", "m"), timeout_s=10, max_retries=1,
                          backoff_base_s=0.001, backoff_max_s=0.01, **kw)


def open_call(p: OpenAIProvider) -> contextlib.aclosing[Any]:
    """The call's event stream, closed on leaving the block."""
    return contextlib.aclosing(cast(Any, p.stream(ModelRequest(messages=USER, agent="default", session_id="s"))))


async def call(p: OpenAIProvider) -> list:
    events = []
    async with open_call(p) as it:
        async for event in it:
            events.append(event)
    return events


BOMB = b"[" * 100_000

# every answer here is broken; the only acceptable outcome is a ProviderError
BROKEN_ANSWERS = {
    "json nesting bomb in a stream chunk": (True, SSE_HEAD + sse_event(BOMB) + END),
    "json nesting bomb as the whole body": (False, json_answer(BOMB)),
    "json nesting bomb in an error body": (True, json_answer(BOMB, b"500 Internal Server Error")),
    "json nesting bomb in a 400 body": (True, json_answer(BOMB, b"400 Bad Request")),
    "choices is a number (stream)": (True, SSE_HEAD + sse_event(b'{"choices": 5}') + END),
    "tool_calls is a number (stream)": (
        True, SSE_HEAD + sse_event(b'{"choices": [{"index": 0, "delta": {"tool_calls": 7}}]}') + END),
    "choices is a number (whole body)": (False, json_answer(b'{"choices": 5}')),
    "tool_calls is true (whole body)": (
        False, json_answer(b'{"choices": [{"index": 0, "message": {"tool_calls": true}}]}')),
    "a tool call without a function name (stream)": (
        True, SSE_HEAD + sse_event(b'{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", '
                                   b'"type": "function", "function": {"arguments": "{}"}}]}, '
                                   b'"finish_reason": "tool_calls"}]}') + END),
    "a tool call without a function name (whole body)": (
        False, json_answer(b'{"choices": [{"index": 0, "message": {"tool_calls": [{"id": "c1", "type": "function", '
                           b'"function": {"name": "", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}')),
    "content parts nested 450 deep": (
        True, SSE_HEAD + sse_event(
            b'{"choices":[{"index":0,"delta":{"content":' + b'[{"text":' * 450 + b'"x"' + b"}]" * 450 + b"}}]}")
        + END),
}


@pytest.mark.parametrize("name", list(BROKEN_ANSWERS))
async def test_a_malformed_answer_ends_in_a_provider_error_not_another_exception(name):
    streaming, payload = BROKEN_ANSWERS[name]
    async with raw_server(answering(payload)) as url, provider(url, streaming=streaming) as p:
        with pytest.raises(ProviderError):
            await call(p)


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_lone_surrogate_escaped_by_the_model_becomes_a_replacement_character(streaming):
    """JSON may escape a surrogate alone (``\\ud800``); UTF-8 cannot carry it, so it would fail
    the store and the client later: the completion has U+FFFD there, in text and in tool
    arguments, and a valid escaped pair stays the character it encodes."""
    text = 'lone \\ud800 here, pair \\ud83d\\ude00 kept, low \\udfff'
    args = '{\\"q\\": \\"\\udc00\\"}'
    if streaming:
        answer = (SSE_HEAD + sse_event(b'{"choices": [{"index": 0, "delta": {"content": "%s"}}]}' % text.encode())
                  + sse_event(b'{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", '
                              b'"type": "function", "function": {"name": "t", "arguments": "%s"}}]}, '
                              b'"finish_reason": "tool_calls"}]}' % args.encode()) + END)
    else:
        answer = json_answer(b'{"choices": [{"index": 0, "message": {"content": "%s", "tool_calls": [{"id": "c1", '
                             b'"type": "function", "function": {"name": "t", "arguments": "%s"}}]}, '
                             b'"finish_reason": "tool_calls"}]}' % (text.encode(), args.encode()))
    async with raw_server(answering(answer)) as url, provider(url, streaming=streaming) as p:
        events = await call(p)
    completion = events[-1]
    assert isinstance(completion, Completion)
    assert completion.message.content == "lone \ufffd here, pair \U0001f600 kept, low \ufffd"
    assert json.loads(completion.message.tool_calls[0].arguments) == {"q": "\ufffd"}
    for event in events:  # every piece is text UTF-8 can carry
        (event.text if isinstance(event, TextDelta) else event.message.content or "").encode("utf-8")


async def test_a_nesting_bomb_from_the_model_list_ends_in_a_provider_error():
    async with raw_server(answering(json_answer(BOMB))) as url, provider(url, model=None) as p:
        with pytest.raises(ProviderError):
            await call(p)


@pytest.mark.parametrize("answer", [
    (lambda body: b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n" % len(body) + body)(
        b"<html>captive portal: log in</html>"),
    (lambda body: b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                  b"content-length: %d\r\n\r\n" % len(body) + body)(
        gzip.compress(b"data: " + delta("zipped") + b"\n\ndata: [DONE]\n\n")),
], ids=["text/html page", "gzip-encoded stream (never asked for)"])
async def test_a_200_that_is_not_an_event_stream_is_an_error_not_an_empty_answer(answer):
    async with raw_server(answering(answer)) as url, provider(url) as p:
        with pytest.raises(ProviderError):
            await call(p)


@pytest.mark.parametrize("streaming", [True, False])
async def test_an_unrequested_response_never_answers_the_next_request(streaming):
    """A server that writes a second, unrequested response right behind the
    first: it must not be taken as the answer to the next call."""
    if streaming:
        first, smuggled, genuine = sse_answer("first"), sse_answer("SMUGGLED"), sse_answer("second")
    else:
        first, smuggled, genuine = (json_answer(completion_json(t)) for t in ("first", "SMUGGLED", "second"))

    async def handler(stream):
        await read_request(stream)
        await stream.send_all(first + smuggled)  # one write: both arrive in the client's first read
        while await read_request(stream):
            await stream.send_all(genuine)

    async with raw_server(handler) as url, provider(url, streaming=streaming) as p:
        texts = []
        for _ in range(2):
            try:
                completion = (await call(p))[-1]
            except ProviderError:
                texts.append(None)
            else:
                texts.append(completion.message.content)
    assert texts[0] == "first"
    assert texts[1] != "SMUGGLED"


async def test_the_key_echoed_by_the_model_list_is_not_in_the_error():
    async def handler(stream):
        head = await read_request(stream)
        echo = head.replace(b"\r\n", b" ").replace(b'"', b"")
        await stream.send_all(json_answer(b'{"error": {"message": "bad auth: ' + echo + b'"}}', b"401 Unauthorized"))

    async with raw_server(handler) as url, provider(url, model=None) as p:
        with pytest.raises(ProviderError) as info:
            await call(p)
    assert KEY not in str(info.value)


async def test_no_piece_of_the_key_survives_the_message_cut():
    """The server's message is cut at 400 characters; a key straddling the
    cut must not leave its first characters in the error."""
    message = "p" * 390 + " " + KEY

    async def handler(stream):
        await read_request(stream)
        await stream.send_all(json_answer(json.dumps({"error": {"message": message}}).encode(), b"401 Unauthorized"))

    async with raw_server(handler) as url, provider(url) as p:
        with pytest.raises(ProviderError) as info:
            await call(p)
    assert KEY[:9] not in str(info.value)


async def test_a_streamed_answer_larger_than_a_whole_body_may_be_is_refused():
    """A non-streamed answer is read up to MAX_BODY_BYTES; a stream must be
    bounded too, in bytes, whatever its events carry (here: nothing the
    assembler keeps, so the answer-length bound never trips)."""
    piece = sse_event(json.dumps({"choices": [], "padding": "x" * 60_000}).encode())
    pieces = MAX_BODY_BYTES // 60_000 + 16

    async def handler(stream):
        await read_request(stream)
        await stream.send_all(SSE_HEAD)
        for _ in range(pieces):
            await stream.send_all(piece)
        await stream.send_all(END)

    async with raw_server(handler) as url, provider(url) as p:
        size = 0
        with pytest.raises(ProviderError):
            async with open_call(p) as it:
                async for event in it:
                    if isinstance(event, TextDelta):
                        size += len(event.text)
                    assert not isinstance(event, Completion), f"a {size}-character answer was accepted"


@pytest.mark.parametrize("trickle", ["the head a byte at a time", "1xx heads without end",
                                     "comments only in the stream", "one event never finished"])
async def test_a_trickle_never_keeps_a_call_past_its_timeout(trickle):
    """``timeout_s`` bounds each read; a server that sends a byte (or a comment)
    just often enough must still not hold the call: the head must arrive whole
    within timeout_s, and a stream must bring a ``data:`` event within it."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"

    async def handler(stream):
        await read_request(stream)
        while True:
            if trickle == "the head a byte at a time":
                for byte in head:
                    await stream.send_all(bytes([byte]))
                    await trio.sleep(0.05)
            elif trickle == "1xx heads without end":
                await stream.send_all(b"HTTP/1.1 102 Processing\r\n\r\n")
            elif trickle == "comments only in the stream":
                await stream.send_all(head)
                while True:
                    await stream.send_all(chunked(b": still thinking\n"))
                    await trio.sleep(0.05)
            else:
                await stream.send_all(head + chunked(b"data: {\"choices\""))
                while True:
                    await stream.send_all(chunked(b" "))
                    await trio.sleep(0.05)
            await trio.sleep(0.05)

    async with raw_server(handler) as url, OpenAIProvider(url, KEY, "m", timeout_s=0.5, max_retries=0) as p:
        with trio.fail_after(10), pytest.raises(ProviderError, match="no response within") as info:
            await call(p)
    assert info.value.retryable


@pytest.mark.parametrize("answer", ["empty events without end", "text without end", "a whole body trickled"])
async def test_an_answer_that_never_ends_is_cut_off_at_call_timeout_s(answer):
    """``timeout_s`` bounds each read, so a server that keeps sending — events with no
    choices, a word a tick, a body a byte at a time — would hold a turn for ever:
    ``call_timeout_s`` ends the attempt, as a ProviderError naming it."""

    async def handler(stream):
        if not await read_request(stream):
            return
        if answer == "a whole body trickled":
            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                  b"content-length: 1000000\r\n\r\n")
        else:
            await stream.send_all(SSE_HEAD)
        event = (sse_event(b'{"choices": []}') if answer == "empty events without end"
                 else sse_event(delta("la ")) if answer == "text without end" else b" ")
        while True:
            await stream.send_all(event)
            await trio.sleep(0.02)

    streaming = answer != "a whole body trickled"
    async with raw_server(handler) as url, provider(url, streaming=streaming, call_timeout_s=0.3) as p:
        with trio.fail_after(30):  # a hang guard, not a timing: the cut comes after 0.3 s per attempt
            with pytest.raises(ProviderError, match="call_timeout_s"):
                await call(p)


def test_call_timeout_s_must_be_positive():
    with pytest.raises(ValueError, match="call_timeout_s"):
        OpenAIProvider("http://127.0.0.1:9/v1", call_timeout_s=0)


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("where", ["text", "tool arguments"])
async def test_an_answer_longer_than_max_answer_chars_is_refused(streaming, where):
    """Far past any model's output limit, an answer would be stored, encoded and sent whole on
    the event loop: past MAX_ANSWER_CHARS it is a malformed answer, streamed or not."""
    piece = "x" * 100_000
    pieces = MAX_ANSWER_CHARS // len(piece) + 2
    if streaming:
        if where == "text":
            events = b"".join(sse_event(delta(piece)) for _ in range(pieces))
        else:
            events = sse_event(json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "t", "arguments": ""}}]}}]}).encode())
            events += b"".join(sse_event(json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": piece}}]}}]}).encode()) for _ in range(pieces))
        answer = SSE_HEAD + events + END
    else:
        message = ({"content": piece * pieces} if where == "text" else
                   {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": piece * pieces}}]})
        answer = json_answer(json.dumps({"choices": [{"index": 0, "message": message}]}).encode())
    async with raw_server(answering(answer)) as url, provider(url, streaming=streaming) as p:
        with pytest.raises(ProviderError, match="longer than"):
            await call(p)


@pytest.mark.parametrize("end_apart", [False, True])
async def test_streamed_answers_keep_one_connection_whether_the_body_ends_with_done_or_after_it(end_apart):
    """The body's last chunk comes in the same write as ``[DONE]`` (the usual case: nothing more is
    waited for) or a moment later (read within the drain time): either way the answer was read to
    its end, and the next call goes over the same connection."""
    connections = []

    async def handler(stream):
        connections.append(stream)
        while await read_request(stream):
            answer = sse_answer("hello")
            if end_apart:
                await stream.send_all(answer[:-len(b"0\r\n\r\n")])
                await trio.sleep(0.05)
                await stream.send_all(b"0\r\n\r\n")
            else:
                await stream.send_all(answer)

    async with raw_server(handler) as url, provider(url) as p:
        for _ in range(3):
            assert (await call(p))[-1].message.content == "hello"
    assert len(connections) == 1
