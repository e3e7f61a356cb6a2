"""StreamAssembler / completion_from_response on hand-written chunks
(interleaved tool-call deltas, empty arguments,
content with tool calls, invalid JSON), as plain dicts and as SDK objects."""

from __future__ import annotations

import json

import pytest

from ongridd.llm.assemble import StreamAssembler, completion_from_response
from ongridd.llm.types import Message, TextDelta, Usage


def _chunk(delta: dict | None = None, finish_reason: str | None = None, usage: dict | None = None, choices=True) -> dict:
    body: dict = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}] if choices else []
    if usage is not None:
        body["usage"] = usage
    return body


# A stream of interleaved tool-call deltas (only choices[0].delta and finish_reason).
C11_A = [
    _chunk({"role": "assistant", "content": "On it."}),
    _chunk({"tool_calls": [{"index": 0, "id": "call_s1", "type": "function", "function": {"name": "AgentTool", "arguments": ""}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"subagent_type":"specialist-'}}]}),
    _chunk({"tool_calls": [{"index": 1, "id": "call_s2", "type": "function", "function": {"name": "SendMessage", "arguments": '{"text":"checking"}'}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'sre","description":"5xx","prompt":"Check 5xx on web-1"}'}}]}),
    _chunk({}, finish_reason="tool_calls"),
]


def _as_sdk(chunks: list[dict]) -> list:
    from openai.types.chat import ChatCompletionChunk

    return [ChatCompletionChunk.model_validate(c) for c in chunks]


def _assemble(chunks):
    asm = StreamAssembler()
    events = []
    for chunk in chunks:
        events.extend(asm.feed(chunk))
    return events, asm.finish()


@pytest.mark.parametrize("form", ["dict", "sdk"])
def test_c11_a_interleaved_tool_calls_routed_by_index(form):
    chunks = C11_A if form == "dict" else _as_sdk(C11_A)
    events, completion = _assemble(chunks)
    assert events == [TextDelta("On it.")]
    msg = completion.message
    assert msg.content == "On it."
    assert [(c.id, c.name) for c in msg.tool_calls] == [("call_s1", "AgentTool"), ("call_s2", "SendMessage")]
    assert json.loads(msg.tool_calls[0].arguments) == {
        "subagent_type": "specialist-sre",
        "description": "5xx",
        "prompt": "Check 5xx on web-1",
    }
    assert msg.tool_calls[1].arguments == '{"text":"checking"}'
    assert completion.finish_reason == "tool_calls"
    # Replayed in the next request: content and both calls.
    wire = msg.to_wire()
    assert wire["content"] == "On it." and len(wire["tool_calls"]) == 2


@pytest.mark.parametrize("form", ["dict", "sdk"])
def test_c11_b_empty_arguments_kept_and_replayed_as_empty_object(form):
    chunks = [
        _chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_h", "type": "function", "function": {"name": "cluster_health", "arguments": ""}}]}),
        _chunk({}, finish_reason="tool_calls"),
    ]
    _, completion = _assemble(chunks if form == "dict" else _as_sdk(chunks))
    (call,) = completion.message.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_h", "cluster_health", "")
    assert completion.message.content is None
    assert call.to_wire()["function"]["arguments"] == "{}"


def test_chunks_without_id_or_name_attach_to_their_index_never_dropped():
    chunks = [
        _chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "two", "arguments": "[1"}}]}),
        _chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "one", "arguments": "{"}}]}),
        _chunk({"tool_calls": [{"index": 1, "function": {"arguments": ",2]"}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {}}]}),  # an empty piece: nothing lost, nothing added
    ]
    _, completion = _assemble(chunks)
    calls = {c.id: (c.name, c.arguments) for c in completion.message.tool_calls}
    assert calls == {"a": ("one", "{}"), "b": ("two", "[1,2]")}


def test_quirk_every_call_at_index_zero_with_distinct_ids():
    chunks = [
        _chunk({"tool_calls": [{"index": 0, "id": "x1", "function": {"name": "f", "arguments": "{\"a\":"}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        _chunk({"tool_calls": [{"index": 0, "id": "x2", "function": {"name": "g", "arguments": "{}"}}]}),
        _chunk({"tool_calls": [{"index": 0, "id": "x2", "function": {"arguments": ""}}]}),  # repeated id: same call
    ]
    _, completion = _assemble(chunks)
    assert [(c.id, c.name, c.arguments) for c in completion.message.tool_calls] == [
        ("x1", "f", '{"a":1}'),
        ("x2", "g", "{}"),
    ]


def test_quirk_missing_index_continues_the_last_call():
    chunks = [
        _chunk({"tool_calls": [{"id": "k1", "function": {"name": "f", "arguments": "{\"q\""}}]}),
        _chunk({"tool_calls": [{"function": {"arguments": ": 2}"}}]}),
        _chunk({"tool_calls": [{"id": "k2", "function": {"name": "g", "arguments": "{}"}}]}),
    ]
    _, completion = _assemble(chunks)
    assert [(c.id, c.name, c.arguments) for c in completion.message.tool_calls] == [
        ("k1", "f", '{"q": 2}'),
        ("k2", "g", "{}"),
    ]


def test_length_in_the_middle_of_a_tool_call_keeps_the_partial_call():
    chunks = [
        _chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "get_active_incidents", "arguments": '{"lim'}}]}),
        _chunk({}, finish_reason="length"),
    ]
    _, completion = _assemble(chunks)
    assert completion.finish_reason == "length"
    (call,) = completion.message.tool_calls
    assert call.arguments == '{"lim'


def test_usage_chunk_with_no_choices_and_text_deltas_in_order():
    chunks = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Disk "}),
        _chunk({"content": "is full."}),
        _chunk({}, finish_reason="stop"),
        _chunk(usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}, choices=False),
    ]
    events, completion = _assemble(chunks)
    assert events == [TextDelta("Disk "), TextDelta("is full.")]  # the empty first piece is not an event
    assert completion.message == Message(role="assistant", content="Disk is full.")
    assert completion.finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 3)


def test_stream_without_finish_reason_reports_none():
    _, completion = _assemble([_chunk({"content": "cut"})])
    assert completion.finish_reason is None
    assert completion.usage is None


def test_other_choices_are_ignored():
    chunk = _chunk({"content": "zero"})
    chunk["choices"].append({"index": 1, "delta": {"content": "one"}, "finish_reason": None})
    _, completion = _assemble([chunk])
    assert completion.message.content == "zero"


# ---- non-streaming --------------------------------------------------------

C7_ARGUMENTS = [
    '{"subagent_type": "specialist-sre", "description": "502s", "prompt": "Check nginx 502 rate on web-1',
    '["specialist-sre", "check web-2"]',
    '{"subagent_type": "specialist-sre"}',
    '{"subagent_type":"specialist-sre","description":"5xx","prompt":"Check 5xx on web-3",}',
    '{"message": "Looking into the 502s now."}',
]


def _response(content, tool_calls, finish_reason="tool_calls"):
    return {
        "id": "r",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }


@pytest.mark.parametrize("form", ["dict", "sdk"])
def test_c7_raw_arguments_come_out_unaltered_non_streaming(form):
    calls = [
        {"id": f"call_{x}", "type": "function", "function": {"name": "AgentTool" if x != "e" else "SendMessage", "arguments": a}}
        for x, a in zip("abcde", C7_ARGUMENTS)
    ]
    response = _response(None, calls)
    if form == "sdk":
        from openai.types.chat import ChatCompletion

        response = ChatCompletion.model_validate(response)
    completion = completion_from_response(response)
    assert [c.arguments for c in completion.message.tool_calls] == C7_ARGUMENTS
    assert [c.id for c in completion.message.tool_calls] == [f"call_{x}" for x in "abcde"]
    assert completion.usage.completion_tokens == 7


C24_TEXT = "The 502s began at 10:40 UTC. I'll have specialist-sre look at web-1."
C24_ARGS = '{"subagent_type":"specialist-sre","description":"web-1 502s","prompt":"Check nginx upstream errors on web-1 since 10:40 UTC"}'


@pytest.mark.parametrize("content,expected", [(C24_TEXT, C24_TEXT), ("", None), (None, None)])
def test_c24_text_and_tool_calls_in_one_message(content, expected):
    call = {"id": "call_m1", "type": "function", "function": {"name": "AgentTool", "arguments": C24_ARGS}}
    completion = completion_from_response(_response(content, [call]))
    assert completion.message.content == expected
    assert completion.message.tool_calls[0].arguments == C24_ARGS
    wire = completion.message.to_wire()
    assert wire["content"] == expected and wire["tool_calls"][0]["id"] == "call_m1"


def test_response_without_choices_is_an_empty_message():
    completion = completion_from_response({"choices": []})
    assert completion.message.content == "" and completion.message.tool_calls == ()
    assert completion.finish_reason is None


def test_cached_tokens_come_from_prompt_tokens_details():
    usage = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
             "prompt_tokens_details": {"cached_tokens": 768}}
    _, streamed = _assemble([_chunk({"content": "ok"}, finish_reason="stop"), _chunk(usage=usage, choices=False)])
    assert streamed.usage == Usage(prompt_tokens=900, completion_tokens=40, cached_tokens=768)
    whole = completion_from_response({"choices": [{"index": 0, "message": {"content": "ok"}}],
                                      "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
    assert whole.usage == Usage(prompt_tokens=5, completion_tokens=1, cached_tokens=0)  # not reported: 0


def test_a_tool_call_without_a_function_name_is_refused_in_both_forms():
    """A call that never got a name names nothing to run, answer or replay: ValueError (the
    provider turns it into a malformed-answer error) rather than a call the store cannot keep."""
    nameless = {"index": 0, "id": "c1", "type": "function", "function": {"arguments": "{}"}}
    with pytest.raises(ValueError, match="without a function name"):
        _assemble([_chunk({"tool_calls": [nameless]}, finish_reason="tool_calls")])
    with pytest.raises(ValueError, match="without a function name"):
        completion_from_response(_response(None, [{"id": "c1", "type": "function",
                                                   "function": {"name": "", "arguments": "{}"}}]))
