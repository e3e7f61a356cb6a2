"""Hostile use of the remembered redaction of model requests (RedactionMemo):
secrets added and removed between calls, equal text in different messages,
content that is not text, threads, and many huge messages against the
memo's bounds."""

from __future__ import annotations

import json
import threading
from typing import Any

from ongridd.llm.redacting import RedactingModel, RedactionMemo, redact_request
from ongridd.llm.types import Message, ModelRequest, ToolCall
from ongridd.secretset import REDACTED, REGISTRY, Redactor
from tests.secrets.test_redaction_memo import _Recorder

SECRET = "hostile-memo-secret-0123456789"
OTHER = "hostile-memo-other-ABCDEFGHIJ"


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (tuple, list)):
        return sum(_chars(v) for v in value)
    return 0


def kept_chars(memo: RedactionMemo) -> int:
    """The characters of text the memo holds (in strings, or tuples of them): its keys' and its values'."""
    total = 0
    data: dict[Any, Any] = memo._memo._data
    for key, (value, _weight) in data.items():
        content, calls = key
        total += _chars(content) + sum(_chars(c.arguments) for c in calls)
        if value[0]:
            total += _chars(value[1]) + sum(_chars(c.arguments) for c in value[2])
    return total


def text(message: Message) -> str:
    assert isinstance(message.content, str)
    return message.content


def test_a_secret_added_then_removed_is_redacted_exactly_while_held() -> None:
    memo = RedactionMemo()
    history = (Message(role="user", content=f"key {SECRET}"),
               Message(role="assistant", tool_calls=(ToolCall(id="a", name="t", arguments=json.dumps({"k": SECRET})),)),
               Message(role="tool", content=json.dumps([SECRET]), tool_call_id="a"))
    request = ModelRequest(messages=history)
    with REGISTRY.hold([OTHER]):
        assert memo.redact_request(request) is request  # remembered clean
        with REGISTRY.hold([SECRET]):
            out = memo.redact_request(request)
            assert SECRET not in json.dumps([m.to_wire() for m in out.messages])
            assert out.messages[0].content == f"key {REDACTED}"
        # the secret is no longer held: the plain text again, not the remembered redaction
        assert memo.redact_request(request) is request


def test_equal_text_in_different_messages_keeps_each_message_s_own_fields() -> None:
    memo = RedactionMemo()
    redactor = Redactor([SECRET])
    text = f"the same {SECRET} text"
    messages = (Message(role="user", content=text), Message(role="tool", content=text, tool_call_id="c1", name="t1"),
                Message(role="tool", content=text, tool_call_id="c2", name="t2"), Message(role="system", content=text))
    request = ModelRequest(messages=messages)
    for _ in range(2):
        out = memo.redact_request(request, redactor)
        assert list(out.messages) == list(redact_request(request, redactor.redact).messages)
        assert [(m.role, m.tool_call_id, m.name) for m in out.messages] == [
            (m.role, m.tool_call_id, m.name) for m in messages]
    assert len(memo) == 1


def test_content_that_is_not_text_is_redacted_each_time_and_never_weighs_nothing() -> None:
    memo = RedactionMemo(max_messages=4, max_chars=1000)
    redactor = Redactor([SECRET])
    values: list[Any] = [1, True, 1.0, (SECRET * 1000,), b"x", None]
    odd = [Message(role="user", content=value) for value in values]
    request = ModelRequest(messages=tuple(odd) + (Message(role="user", content=SECRET),))
    for _ in range(2):
        out = memo.redact_request(request, redactor)
        assert list(out.messages) == list(redact_request(request, redactor.redact).messages)
        assert [m.content for m in out.messages[:6]] == [m.content for m in odd]
    assert kept_chars(memo) <= 1000  # the 30,000-character tuple is not held


def test_the_memo_bound_counts_the_redacted_text_it_keeps() -> None:
    """A short secret (a database password) makes the redacted text longer than the original."""
    memo = RedactionMemo(max_messages=100, max_chars=10_000)
    redactor = Redactor(["pw"])
    messages = tuple(Message(role="user", content=f"{i} " + "pw." * 1000) for i in range(20))
    request = ModelRequest(messages=messages)
    out = memo.redact_request(request, redactor)
    assert all("pw" not in text(m) for m in out.messages)
    assert kept_chars(memo) <= 10_000
    assert memo._memo.weight <= 10_000


def test_many_huge_messages_stay_within_the_bounds() -> None:
    memo = RedactionMemo(max_messages=50, max_chars=2_000_000)
    redactor = Redactor([SECRET])
    messages = tuple(Message(role="user", content=f"{i} {SECRET} " + "z" * 300_000) for i in range(40))
    for n in (10, 25, 40):
        request = ModelRequest(messages=messages[:n])
        out = memo.redact_request(request, redactor)
        assert not any(SECRET in text(m) for m in out.messages)
        assert kept_chars(memo) <= 2_000_000 and len(memo) <= 50


def test_threads_sharing_one_memo_while_the_secret_set_changes_always_get_the_plain_result() -> None:
    memo = RedactionMemo(max_messages=64, max_chars=100_000)
    redactors = [Redactor([]), Redactor([SECRET]), Redactor([OTHER]), Redactor([SECRET, OTHER])]
    history = tuple(Message(role="user", content=f"{i} {SECRET if i % 2 else OTHER} {i % 5}") for i in range(40))
    failures: list[str] = []

    def work(seed: int) -> None:
        for step in range(300):
            redactor = redactors[(seed + step) % len(redactors)]
            request = ModelRequest(messages=history[: 1 + (seed * 7 + step) % len(history)])
            got = memo.redact_request(request, redactor)
            want = redact_request(request, redactor.redact)
            if list(got.messages) != list(want.messages):
                failures.append(f"thread {seed} step {step}")
                return

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []


async def test_the_model_wrapper_redacts_a_secret_registered_after_the_history_was_remembered() -> None:
    inner = _Recorder()
    model = RedactingModel(inner)
    history = tuple(Message(role="user", content=f"turn {i} {SECRET}") for i in range(5))
    with REGISTRY.hold([OTHER]):
        [e async for e in model.stream(ModelRequest(messages=history))]
        with REGISTRY.hold([SECRET]):
            [e async for e in model.stream(ModelRequest(messages=history))]
        [e async for e in model.stream(ModelRequest(messages=history))]
    assert all(SECRET in text(m) for m in inner.seen[0].messages)
    assert not any(SECRET in text(m) for m in inner.seen[1].messages)
    assert all(SECRET in text(m) for m in inner.seen[2].messages)
