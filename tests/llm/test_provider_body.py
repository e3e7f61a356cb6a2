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
