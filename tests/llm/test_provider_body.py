"""The request body the OpenAI provider writes, with its per-message JSON
memo, is byte for byte ``json.dumps`` of the whole request (no server)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.llm.openai_provider import OpenAIProvider
from ongridd.llm.types import Message, ModelRequest, ToolCall

_text = st.text(max_size=30)
_call = st.builds(lambda i, a: ToolCall(id=f"c{i}", name="t", arguments=a), st.integers(0, 3),
                  st.one_of(st.just(""), st.just("  "), _text))
_message = st.one_of(
    st.builds(lambda r, c: Message(role=r, content=c), st.sampled_from(["system", "user", "assistant"]),
              st.one_of(st.none(), _text)),
    st.builds(lambda c, i: Message(role="tool", content=c, tool_call_id=i, name="t"), _text,
              st.one_of(st.none(), st.just("c0"))),
    st.builds(lambda c, calls: Message(role="assistant", content=c, tool_calls=tuple(calls)),
              st.one_of(st.none(), st.just(""), _text), st.lists(_call, min_size=1, max_size=3)),
)
TOOLS = ({"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}},)


def reference(model: str, request: ModelRequest, stream: bool, stream_options: bool) -> bytes:
    body: dict = {"model": model, "messages": [m.to_wire() for m in request.messages]}
    if request.tools:
        body["tools"] = [dict(t) for t in request.tools]
    if stream:
        body["stream"] = True
        if stream_options:
            body["stream_options"] = {"include_usage": True}
    return json.dumps(body, default=str).encode()


class _Odd(Message):
    def to_wire(self):  # a subclass writing its own wire form is never taken from the memo
        return {"role": self.role, "content": "odd"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_message, max_size=6), min_size=1, max_size=5), st.booleans(), st.booleans(),
       st.booleans(), st.booleans())
def test_the_body_is_json_dumps_of_the_request_on_every_call_of_a_growing_history(
        batches, tools, stream, stream_options, copies):
    p = OpenAIProvider("http://127.0.0.1:9/v1", None, "m\u00e9-model")
    p._stream_options_ok = stream_options
    history: list[Message] = [Message(role="system", content="sys")]
    for batch in batches:
        history += batch
        sent = [Message(role=m.role, content=m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id)
                if copies else m for m in history]
        request = ModelRequest(messages=tuple(sent), tools=TOOLS if tools else ())
        assert p._body("m\u00e9-model", request, stream=stream) == reference("m\u00e9-model", request, stream,
                                                                             stream_options)


def test_equal_messages_share_one_remembered_text_and_subclasses_and_odd_content_are_encoded_each_time():
    p = OpenAIProvider("http://127.0.0.1:9/v1", None, "m")
    odd = _Odd(role="user", content="x")
    listed = Message(role="user", content=["not", "a", "str"])
    same = Message(role="user", content="x")
    request = ModelRequest(messages=(same, odd, listed, Message(role="user", content="x")))
    for _ in range(2):
        assert p._body("m", request, stream=False) == reference("m", request, False, True)
    assert len(p._wire_json) == 1


_params = st.dictionaries(st.sampled_from(["type", "properties", "required", "x"]),
                          st.one_of(st.just("object"), _text, st.lists(_text, max_size=2)), max_size=3)
_entry = st.one_of(
    st.builds(lambda n, d, p: {"type": "function", "function": {"name": n, "description": d, "parameters": p}},
              st.sampled_from(["a", "b", "c"]), _text, _params),
    st.builds(lambda n, p: {"type": "function", "function": {"name": n, "parameters": p}},  # no description
              st.sampled_from(["a", "b"]), _params),
    st.builds(lambda n, d: {"type": "function", "function": {"name": n, "description": d, "parameters": {"k": {1, 2}}},
                            "strict": True}, st.sampled_from(["a", "b"]), _text),  # another key; a set (default=str)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_entry, max_size=4), min_size=1, max_size=4), st.booleans())
def test_the_tools_text_is_json_dumps_whatever_lists_repeat_their_entries(lists, share):
    p = OpenAIProvider("http://127.0.0.1:9/v1", None, "m")
    seen: list[dict] = []
    for entries in lists:
        if share and seen:  # a new list holding the very entries of an earlier one, then a new entry
            entries = [*seen[: len(entries)], *entries]
        seen = entries
        tools = tuple(entries)
        for listed in (tools, list(tools), tuple(entries)):
            assert p._tools_wire(listed) == json.dumps([dict(t) for t in listed], default=str)


def test_an_entry_is_remembered_by_its_parameters_identity_and_a_changed_description_is_not_taken():
    p = OpenAIProvider("http://127.0.0.1:9/v1", None, "m")
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    first = ({"type": "function", "function": {"name": "q", "description": "one", "parameters": params}},)
    again = ({"type": "function", "function": {"name": "q", "description": "one", "parameters": params}},)
    other = ({"type": "function", "function": {"name": "q", "description": "two", "parameters": params}},)
    copied = ({"type": "function", "function": {"name": "q", "description": "one", "parameters": dict(params)}},)
    texts = [p._tools_wire(t) for t in (first, again, other, copied)]
    assert texts == [json.dumps(list(t)) for t in (first, again, other, copied)]
    entries = [k for k in p._tools_json._data if isinstance(k, tuple)]
    assert len(entries) == 3  # first/again share one entry; other (description) and copied (new dict) do not


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40))
def test_an_agent_or_session_header_is_always_a_legal_header_value_and_decodes_back(value):
    from urllib.parse import unquote

    from ongridd.llm.http import _header_line
    from ongridd.llm.openai_provider import AGENT_HEADER, header_value

    encoded = header_value(value)
    assert _header_line(AGENT_HEADER, encoded) == f"{AGENT_HEADER}: {encoded}\r\n".encode("ascii")
    assert unquote(encoded) == value
