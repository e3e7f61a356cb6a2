"""OpenAIProvider over real HTTP: against the scripted model server (streamed
tool calls, empty arguments and content, bad arguments, retries, headers) and against tiny hand-rolled HTTP servers for
what the scripted server cannot do (a stream that hangs or breaks midway)."""

from __future__ import annotations

import contextlib
import functools
import json
import socket

import pytest
import trio

from ongridd.errors import ProviderError
from ongridd.fakellm import open_fake_llm
from ongridd.llm.openai_provider import OpenAIProvider, _Failure
from ongridd.metrics import MODEL_CALLS_WAITING
from ongridd.llm.types import Completion, Message, ModelRequest, TextDelta, ToolCall

USER = (Message(role="user", content="What is filling the disk?"),)


def provider(base_url: str, **kw) -> OpenAIProvider:
    kw.setdefault("timeout_s", 10)
    kw.setdefault("max_retries", 3)
    kw.setdefault("backoff_base_s", 0.001)
    kw.setdefault("backoff_max_s", 0.01)
    return OpenAIProvider(base_url, kw.pop("api_key", None), kw.pop("model", "test-model"), **kw)


async def run(p: OpenAIProvider, messages=USER, **kw) -> tuple[list[TextDelta], Completion]:
    kw.setdefault("agent", "default")
    kw.setdefault("session_id", "sess-1")
    events = []
    async with contextlib.aclosing(p.stream(ModelRequest(messages=messages, **kw))) as stream:
        async for event in stream:
            events.append(event)
    assert isinstance(events[-1], Completion) and all(isinstance(e, TextDelta) for e in events[:-1])
    return events[:-1], events[-1]


# ---- tool-call assembly through the real client path ------------------------

C11_A_ARGS = {"subagent_type": "specialist-sre", "description": "5xx", "prompt": "Check 5xx on web-1"}


@pytest.mark.parametrize("streaming", [True, False])
async def test_c11_a_text_and_interleaved_tool_calls(streaming):
    script = {
        "default": [
            {
                "content": "On it.",
                "tool_calls": [
                    {"name": "AgentTool", "arguments": C11_A_ARGS},
                    {"name": "SendMessage", "arguments": {"text": "checking"}},
                ],
            }
        ]
    }
    async with open_fake_llm(script) as fake, provider(fake.base_url, streaming=streaming) as p:
        deltas, completion = await run(p)
    assert "".join(d.text for d in deltas) == "On it."
    msg = completion.message
    assert msg.content == "On it."
    assert [(c.id, c.name) for c in msg.tool_calls] == [("call_0_0", "AgentTool"), ("call_0_1", "SendMessage")]
    assert json.loads(msg.tool_calls[0].arguments) == C11_A_ARGS
    assert json.loads(msg.tool_calls[1].arguments) == {"text": "checking"}
    assert completion.finish_reason == "tool_calls"
    assert completion.usage is not None and completion.usage.completion_tokens > 0


async def test_c11_b_empty_arguments_run_as_empty_and_replay_as_empty_object():
    script = {
        "specialist-sre": [
            {"tool_calls": [{"name": "cluster_health", "raw_arguments": ""}]},
            {"content_from_tool_results": True},
        ]
    }
    async with open_fake_llm(script) as fake, provider(fake.base_url) as p:
        _, first = await run(p, agent="specialist-sre", session_id="w1")
        (call,) = first.message.tool_calls
        assert (call.id, call.name, call.arguments) == ("call_0_0", "cluster_health", "")
        history = USER + (first.message, Message(role="tool", tool_call_id=call.id, content='{"status": "green"}'))
        _, second = await run(p, history, agent="specialist-sre", session_id="w1")
    replayed = fake.requests[1].body["messages"]
    assert replayed[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert replayed[2] == {"role": "tool", "content": '{"status": "green"}', "tool_call_id": "call_0_0"}
    assert second.message.content == 'cluster_health: {"status": "green"}'


C24_TEXT = "The 502s began at 10:40 UTC. I'll have specialist-sre look at web-1."


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("content,expected", [(C24_TEXT, C24_TEXT), ("", None)])
async def test_c24_text_with_tool_calls_kept_and_replayed(streaming, content, expected):
    args = {"subagent_type": "specialist-sre", "description": "web-1 502s", "prompt": "Check nginx on web-1"}
    script = {"default": [{"content": content, "tool_calls": [{"name": "AgentTool", "arguments": args}]}, {"content": "done"}]}
    async with open_fake_llm(script) as fake, provider(fake.base_url, streaming=streaming) as p:
        deltas, first = await run(p)
        assert first.message.content == expected
        assert "".join(d.text for d in deltas) == (expected or "")
        assert json.loads(first.message.tool_calls[0].arguments) == args
        history = USER + (first.message, Message(role="tool", tool_call_id="call_0_0", content="ok"))
        await run(p, history)
    replayed = fake.requests[1].body["messages"][1]
    assert replayed["role"] == "assistant"
    assert replayed["content"] == expected
    assert replayed["tool_calls"][0]["id"] == "call_0_0"


C7_RAW = [
    '{"subagent_type": "specialist-sre", "description": "502s", "prompt": "Check nginx 502 rate on web-1',
    '["specialist-sre", "check web-2"]',
    '{"subagent_type": "specialist-sre"}',
    '{"subagent_type":"specialist-sre","description":"5xx","prompt":"Check 5xx on web-3",}',
    '{"text": "Looking into the 502s now."}',
]


@pytest.mark.parametrize("streaming", [True, False])
async def test_c7_raw_argument_shapes_unaltered(streaming):
    calls = [{"name": "AgentTool", "raw_arguments": raw} for raw in C7_RAW[:4]]
    calls.append({"name": "SendMessage", "raw_arguments": C7_RAW[4]})
    async with open_fake_llm({"default": [{"tool_calls": calls}]}) as fake, provider(fake.base_url, streaming=streaming) as p:
        _, completion = await run(p)
    assert [c.arguments for c in completion.message.tool_calls] == C7_RAW
    assert [c.id for c in completion.message.tool_calls] == [f"call_0_{i}" for i in range(5)]
    assert completion.message.content is None


async def test_length_cut_partial_call_reaches_the_caller():
    script = {"default": [{"finish_reason": "length", "tool_calls": [{"name": "get_active_incidents", "raw_arguments": '{"lim'}]}]}
    async with open_fake_llm(script) as fake, provider(fake.base_url) as p:
        _, completion = await run(p)
    assert completion.finish_reason == "length"
    assert completion.message.tool_calls == (ToolCall(id="call_0_0", name="get_active_incidents", arguments='{"lim'),)


# ---- request shape: headers, model, tools, usage -------------------------


async def test_headers_model_override_tools_and_stream_options_arrive():
    tools = [{"type": "function", "function": {"name": "host_du_summary", "parameters": {"type": "object", "properties": {}}}}]
    script = {"specialist-disk": [{"http_status": 500}, {"content": "a"}, {"content": "b"}], "磁盘专家": [{"content": "c"}]}
    async with open_fake_llm(script) as fake, provider(fake.base_url, model="base-model") as p:
        await run(p, agent="specialist-disk", session_id="0b6f-uuid", model="persona-model", tools=tools)
        await run(p, agent="specialist-disk", session_id="0b6f-uuid")
        await run(p, agent="磁盘专家", session_id="s-ü")
    first, retry, plain, unicode_ = fake.requests
    # Headers on every call, retries included.
    assert [(r.agent, r.session) for r in fake.requests[:3]] == [("specialist-disk", "0b6f-uuid")] * 3
    assert (unicode_.agent, unicode_.session) == ("磁盘专家", "s-ü")
    assert first.body["model"] == retry.body["model"] == "persona-model"
    assert plain.body["model"] == "base-model"
    assert first.body["tools"] == tools and "tools" not in plain.body
    assert first.body["stream"] is True and first.body["stream_options"] == {"include_usage": True}
    assert first.headers["authorization"] == "***"  # placeholder key sent, never recorded


async def test_model_discovered_from_the_server_when_none_configured():
    async with open_fake_llm({"default": [{"content": "x"}, {"content": "y"}]}) as fake, provider(fake.base_url, model=None) as p:
        await run(p)
        await run(p)
    assert [r.body["model"] for r in fake.requests] == ["ongrid-scripted-model"] * 2


# ---- retries ---------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_transient_status_retried_then_success(status):
    async with open_fake_llm({"default": [{"http_status": status}, {"content": "recovered"}]}) as fake, provider(fake.base_url) as p:
        _, completion = await run(p)
    assert completion.message.content == "recovered"
    assert [r.status for r in fake.requests] == [status, 200]


async def test_retries_exhausted_give_a_provider_error_with_exact_count():
    script = {"default": [{"http_status": 500}] * 5}
    async with open_fake_llm(script) as fake, provider(fake.base_url, max_retries=2) as p:
        with pytest.raises(ProviderError) as info:
            await run(p)
    assert len(fake.requests) == 3
    err = info.value
    assert err.status == 500 and err.retryable
    assert "HTTP 500" in str(err) and "3 attempt(s)" in str(err) and "'default'" in str(err) and "test-model" in str(err)


async def test_timeout_is_retried_then_provider_error():
    script = {"default": [{"delay_s": 30, "content": "too late"}] * 3}
    async with open_fake_llm(script) as fake, provider(fake.base_url, timeout_s=0.2, max_retries=1) as p:
        with trio.fail_after(20):
            with pytest.raises(ProviderError) as info:
                await run(p)
    assert len(fake.requests) == 2
    assert "timeout_s=0.2" in str(info.value) and "2 attempt(s)" in str(info.value)
    assert info.value.status is None and info.value.retryable


async def test_timeout_then_success():
    script = {"default": [{"delay_s": 30, "content": "too late"}, {"content": "in time"}]}
    async with open_fake_llm(script) as fake, provider(fake.base_url, timeout_s=1.0) as p:
        _, completion = await run(p)
    assert completion.message.content == "in time" and len(fake.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(status):
    async with open_fake_llm({"default": [{"http_status": status}, {"content": "never"}]}) as fake, provider(fake.base_url) as p:
        with pytest.raises(ProviderError) as info:
            await run(p)
    assert len(fake.requests) == 1
    assert info.value.status == status and not info.value.retryable
    assert f"HTTP {status}" in str(info.value) and "1 attempt(s)" in str(info.value) and "not retried" in str(info.value)


@pytest.mark.parametrize("model", [None, "test-model"])
async def test_a_404_from_a_base_url_without_v1_says_it_may_lack_v1(model):
    # the scripted model serves /v1/…: a base URL without /v1 meets its 404, as a real server's
    hint = "does llm.base_url (ONGRID_LLM_BASE_URL) lack it"
    async with open_fake_llm({"default": [{"http_status": 404}]}) as fake:
        bare = fake.base_url.removesuffix("/v1")
        async with provider(bare, model=model) as p:
            with pytest.raises(ProviderError) as info:
                await run(p)
        assert info.value.status == 404 and hint in str(info.value), str(info.value)
        assert ("no model name configured" in str(info.value)) == (model is None)
        # a 404 from a base URL that has /v1 is about something else: no such hint
        async with provider(fake.base_url, model=model) as p:
            with pytest.raises(ProviderError) as info:
                await run(p)
        assert info.value.status == 404 and hint not in str(info.value), str(info.value)


async def test_unknown_persona_is_a_400_naming_it():
    async with open_fake_llm({"default": [{"content": "x"}]}) as fake, provider(fake.base_url) as p:
        with pytest.raises(ProviderError, match="specialist-ghost") as info:
            await run(p, agent="specialist-ghost")
    assert info.value.status == 400 and len(fake.requests) == 1


async def test_connection_refused_is_retried_then_reported():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    async with provider(f"http://127.0.0.1:{port}/v1", max_retries=2) as p:
        with pytest.raises(ProviderError) as info:
            await run(p)
    assert "connection error" in str(info.value) and "3 attempt(s)" in str(info.value)


def test_backoff_grows_exponentially_with_jitter_and_honours_retry_after():
    p = OpenAIProvider("http://x/v1", backoff_base_s=0.5, backoff_max_s=8)
    plain = _Failure("x", status=500, retryable=True)
    for attempt, cap in [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (9, 8.0)]:
        for _ in range(50):
            assert cap / 2 <= p._backoff_s(attempt, plain) <= cap
    # a 429/503 with Retry-After has no delay of its own: the provider's shared hold waits instead
    assert p._backoff_s(1, _Failure("x", status=429, retryable=True, retry_after_s=3)) == 0
    assert p._backoff_s(1, _Failure("x", status=503, retryable=True, retry_after_s=60)) == 0
    assert p._backoff_s(1, _Failure("x", status=408, retryable=True, retry_after_s=3)) == 3
    assert 0.25 <= p._backoff_s(1, _Failure("x", status=408, retryable=True, retry_after_s=60)) <= 0.5


def test_invalid_settings_rejected():
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAIProvider("http://x/v1", timeout_s=0)
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIProvider("http://x/v1", max_retries=-1)


async def test_closed_provider_refuses_calls():
    p = provider("http://127.0.0.1:9/v1")
    await p.aclose()
    await p.aclose()  # idempotent
    with pytest.raises(ProviderError, match="closed"):
        await run(p)


# ---- cancellation ---------------------------------------------------------


async def test_cancellation_while_waiting_for_the_answer_is_prompt():
    async with open_fake_llm({"default": [{"delay_s": 60, "content": "late"}]}) as fake, provider(fake.base_url, timeout_s=60) as p:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, p)
                await fake.wait_requests(1)
                nursery.cancel_scope.cancel()
    assert len(fake.requests) == 1  # cancelled, not retried


# A hand-rolled HTTP/1.1 server for streams the scripted server cannot make.


async def read_request(stream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = await stream.receive_some(65536)
        if not piece:
            return b""
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        body += await stream.receive_some(65536)
    return head + b"\r\n\r\n" + body


def sse(obj) -> bytes:
    data = b"data: " + json.dumps(obj).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def chunk(delta=None, finish=None):
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
)


@contextlib.asynccontextmanager
async def raw_server(handler):
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            nursery.cancel_scope.cancel()


async def wait_eof(stream) -> None:
    try:
        while await stream.receive_some(65536):
            pass
    except trio.BrokenResourceError:
        pass


@pytest.mark.parametrize("how", ["cancel", "aclose"])
async def test_stopping_mid_stream_aborts_the_http_stream_promptly(how):
    disconnected = trio.Event()
    requests = []

    async def handler(stream):
        requests.append(await read_request(stream))
        await stream.send_all(STREAM_HEAD + sse(chunk({"role": "assistant", "content": "partial"})))
        await wait_eof(stream)  # never finishes the stream; waits for the client to go away
        disconnected.set()

    async with raw_server(handler) as url, provider(url, timeout_s=60) as p:
        got = []
        with trio.fail_after(10):
            request = ModelRequest(messages=USER, agent="default", session_id="s")
            if how == "cancel":
                with trio.CancelScope() as scope:
                    async for event in p.stream(request):
                        got.append(event)
                        scope.cancel()
                assert scope.cancelled_caught
            else:
                async with contextlib.aclosing(p.stream(request)) as events:
                    async for event in events:
                        got.append(event)
                        break
            await disconnected.wait()
    assert got == [TextDelta("partial")]
    assert len(requests) == 1


async def test_stream_broken_after_text_is_not_retried():
    requests = []

    async def handler(stream):
        requests.append(await read_request(stream))
        await stream.send_all(STREAM_HEAD + sse(chunk({"content": "half an ans"})))
        await stream.aclose()  # dies mid-stream, no terminating chunk

    async with raw_server(handler) as url, provider(url) as p:
        got = []
        with pytest.raises(ProviderError) as info:
            async for event in p.stream(ModelRequest(messages=USER)):
                got.append(event)
    assert got == [TextDelta("half an ans")]
    assert len(requests) == 1
    assert "after text had already been streamed" in str(info.value)


async def test_stream_broken_before_any_text_is_retried():
    requests = []

    async def handler(stream):
        requests.append(await read_request(stream))
        if len(requests) == 1:
            # tool-call pieces only, then the connection dies: nothing reached the caller
            await stream.send_all(STREAM_HEAD + sse(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}]})))
            await stream.aclose()
            return
        body = sse(chunk({"content": "whole"})) + sse(chunk({}, "stop")) + b"%x\r\n%s\r\n" % (14, b"data: [DONE]\n\n") + b"0\r\n\r\n"
        await stream.send_all(STREAM_HEAD + body)
        await wait_eof(stream)

    async with raw_server(handler) as url, provider(url) as p:
        _, completion = await run(p)
    assert len(requests) == 2
    assert completion.message.content == "whole" and completion.message.tool_calls == ()


async def test_server_rejecting_stream_options_is_asked_again_without():
    bodies = []

    async def handler(stream):
        raw = await read_request(stream)
        body = json.loads(raw.partition(b"\r\n\r\n")[2])
        bodies.append(body)
        if "stream_options" in body:
            payload = json.dumps({"error": {"message": "Unrecognized request argument supplied: stream_options"}}).encode()
            await stream.send_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                % (len(payload), payload)
            )
        else:
            body = sse(chunk({"content": "ok"})) + sse(chunk({}, "stop")) + b"%x\r\n%s\r\n" % (14, b"data: [DONE]\n\n") + b"0\r\n\r\n"
            await stream.send_all(STREAM_HEAD + body)
        await wait_eof(stream)

    async with raw_server(handler) as url, provider(url) as p:
        _, first = await run(p)
        _, second = await run(p)
    assert first.message.content == second.message.content == "ok"
    assert ["stream_options" in b for b in bodies] == [True, False, False]


async def test_api_key_never_appears_in_the_error():
    secret = "sk-test-SECRET-0123456789"

    async def handler(stream):
        await read_request(stream)
        payload = json.dumps({"error": {"message": f"Incorrect API key provided: {secret}."}}).encode()
        await stream.send_all(
            b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (len(payload), payload)
        )
        await wait_eof(stream)

    async with raw_server(handler) as url, provider(url, api_key=secret) as p:
        with pytest.raises(ProviderError) as info:
            await run(p)
    assert info.value.status == 401
    assert secret not in str(info.value) and "Incorrect API key provided: ***" in str(info.value)


async def test_calls_beyond_max_concurrent_calls_wait_for_a_slot():
    """Six concurrent calls with ``max_concurrent_calls=2`` against a model
    that takes 0.3 s: never more than two reach the server at once, all six
    answer, and a cancelled call gives its slot back."""
    script = {"default": [{"delay_s": 0.3, "content": f"answer {i}"} for i in range(6)]}
    async with open_fake_llm(script) as fake, provider(fake.base_url, max_concurrent_calls=2) as p:
        answers: list[str] = []
        peak = 0
        waiting_seen: list[float] = []

        async def one(i: int) -> None:
            _deltas, completion = await run(p, session_id="shared")
            answers.append(completion.message.content)

        async def watch() -> None:
            nonlocal peak
            while True:
                in_flight = sum(1 for r in fake.requests if r.status == 0 and r.session == "shared")  # not answered yet
                peak = max(peak, in_flight)
                waiting_seen.append(MODEL_CALLS_WAITING._value.get()) if MODEL_CALLS_WAITING._value.get() else None
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            with trio.move_on_after(0.05):  # a call cancelled midway gives its slot back
                await run(p, session_id="cancelled")
            async with trio.open_nursery() as calls:
                for i in range(6):
                    calls.start_soon(one, i)
            nursery.cancel_scope.cancel()
    assert sorted(answers) == sorted(f"answer {i}" for i in range(6))
    assert peak == 2 and waiting_seen  # the waiting calls showed in ongrid_model_calls_waiting
    assert p._slots.borrowed_tokens == 0 and MODEL_CALLS_WAITING._value.get() == 0


async def test_max_concurrent_calls_must_be_positive():
    with pytest.raises(ValueError, match="max_concurrent_calls"):
        OpenAIProvider("http://127.0.0.1:9/v1", max_concurrent_calls=0)


@pytest.mark.parametrize("after_done", ["close", "hold open"])
async def test_an_answer_complete_at_done_survives_what_the_body_does_after(after_done):
    """After ``[DONE]`` the answer is whole: a connection cut before the body's
    last chunk, or a body held open, neither fails it nor waits out timeout_s."""

    async def handler(stream):
        await read_request(stream)
        done = b"data: [DONE]\n\n"
        await stream.send_all(STREAM_HEAD + sse(chunk({"role": "assistant", "content": "whole"}, "stop"))
                              + b"%x\r\n%s\r\n" % (len(done), done))
        if after_done == "close":
            await stream.aclose()  # no terminating 0-length chunk
        else:
            await wait_eof(stream)

    async with raw_server(handler) as url, provider(url, timeout_s=60, max_retries=0) as p:
        with trio.fail_after(10):
            deltas, completion = await run(p)
    assert completion.message.content == "whole" and deltas == [TextDelta("whole")]


async def test_every_attempt_is_timed_in_the_response_histogram():
    from ongridd.metrics import MODEL_RESPONSE_SECONDS

    def observed() -> tuple[float, float]:
        samples = {s.name: s.value for s in MODEL_RESPONSE_SECONDS.collect()[0].samples}
        return samples["ongrid_model_response_seconds_count"], samples["ongrid_model_response_seconds_sum"]

    count0, sum0 = observed()
    script = {"default": [{"http_status": 503}, {"content": "late", "delay_s": 0.2}]}
    async with open_fake_llm(script) as fake, provider(fake.base_url) as p:
        await run(p)
    count1, sum1 = observed()
    assert count1 - count0 == 2  # the failed attempt and the answered one
    assert sum1 - sum0 >= 0.2  # the answer came after its delay
