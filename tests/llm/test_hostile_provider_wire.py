"""Hostile messages for the OpenAI provider's per-message JSON memo: the
request body stays byte for byte ``json.dumps(..., default=str)`` of the
whole request, whatever the messages hold and in whatever order equal-looking
ones come."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ongridd.llm.openai_provider import OpenAIProvider
from ongridd.llm.types import Message, ModelRequest, ToolCall


def reference(request: ModelRequest) -> bytes:
    return json.dumps({"model": "m", "messages": [m.to_wire() for m in request.messages]}, default=str).encode()


def provider() -> OpenAIProvider:
    return OpenAIProvider("http://127.0.0.1:9/v1", None, "m")


class _Text(str):
    pass


ODD_TEXT = [
    "\ud800", "\udfff\ud800", "a\ud83d", "\U0001f600\U000e0001", "\x00\x01\x1f\x7f\x80\x9f",
    "\u2028\u2029", '"\\/\b\f\n\r\t', "\ufeff\ufffe\uffff", "é" * 3, "x" * 300_000, _Text("a str subclass"),
]


@pytest.mark.parametrize("text", ODD_TEXT, ids=lambda t: repr(t)[:20])
def test_odd_text_anywhere_in_a_message_is_written_as_json_dumps_writes_it(text) -> None:
    p = provider()
    messages = (
        Message(role="user", content=text),
        Message(role="assistant", content=None,
                tool_calls=(ToolCall(id=text, name=text, arguments=text), ToolCall(id="c", name="t", arguments=""))),
        Message(role="tool", content=text, tool_call_id=text),
        Message(role="user", content=str(text)),
    )
    request = ModelRequest(messages=messages)
    for _ in range(3):  # encoded, then remembered
        body = p._body("m", request, stream=False)
        assert body == reference(request)
        body.decode("ascii")  # ensure_ascii, as json.dumps: lone surrogates are escaped


def odd(cls: Any, **fields: Any) -> Any:
    """``cls(**fields)`` with fields of types the annotations do not allow."""
    return cls(**fields)


# pairs of messages equal as keys (1 == True == 1.0, 0.0 == -0.0) that JSON writes differently
LOOKALIKES = [
    (odd(Message, role="tool", content="x", tool_call_id=1), odd(Message, role="tool", content="x", tool_call_id=True)),
    (odd(Message, role="tool", content="x", tool_call_id=1), odd(Message, role="tool", content="x", tool_call_id=1.0)),
    (odd(Message, role="tool", content="x", tool_call_id=0.0), odd(Message, role="tool", content="x", tool_call_id=-0.0)),
    (Message(role="assistant", tool_calls=(odd(ToolCall, id=1, name="t", arguments="{}"),)),
     Message(role="assistant", tool_calls=(odd(ToolCall, id=True, name="t", arguments="{}"),))),
    (Message(role="assistant", tool_calls=(odd(ToolCall, id="c", name=0, arguments="{}"),)),
     Message(role="assistant", tool_calls=(odd(ToolCall, id="c", name=False, arguments="{}"),))),
]


@pytest.mark.parametrize(("first", "second"), LOOKALIKES)
def test_fields_equal_as_keys_but_written_differently_are_never_taken_from_the_memo(first, second) -> None:
    p = provider()
    for message in (first, second, first, second):
        request = ModelRequest(messages=(message,))
        assert p._body("m", request, stream=False) == reference(request)


def test_a_long_history_of_big_messages_keeps_the_memo_bounded() -> None:
    p = provider()
    history = [Message(role="user", content=f"{i}:" + "é" * 200_000) for i in range(60)]
    for n in range(1, len(history) + 1, 7):
        request = ModelRequest(messages=tuple(history[:n]))
        assert p._body("m", request, stream=False) == reference(request)
        assert p._wire_json.weight <= p._wire_json.max_weight
