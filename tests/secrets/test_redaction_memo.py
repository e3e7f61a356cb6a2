"""The remembered redaction of model requests equals the plain one, also
after the secret set changes (RedactionMemo, RedactingModel's default)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.llm.memo import BoundedMemo
from ongridd.llm.redacting import RedactingModel, RedactionMemo, redact_request
from ongridd.llm.types import Completion, Message, ModelRequest, ToolCall
from ongridd.secretset import REDACTED, REGISTRY, Redactor

TOKEN = "memo-token-0123456789"
KEY = "sk-memo-ABCDEFGHIJKLMNOP"

# texts built from pieces that are (or contain, or cut) the secrets below
SECRETS = ["abcd", "cdef", "x", 'q"uo\\te', "é-ü"]
_piece = st.sampled_from(SECRETS + ["ab", "cd", "ef", "y", " ", "\\", '"', "é", "\n", "zz"])
_text = st.lists(_piece, max_size=8).map("".join)
_call = st.builds(lambda i, a: ToolCall(id=f"c{i}", name="t", arguments=a), st.integers(0, 3),
                  st.one_of(_text, _text.map(lambda t: json.dumps({"q": t}))))
_message = st.one_of(
    st.builds(lambda r, c: Message(role=r, content=c), st.sampled_from(["system", "user", "assistant"]), _text),
    st.builds(lambda c: Message(role="tool", content=c, tool_call_id="c0"), _text.map(lambda t: json.dumps([t]))),
    st.builds(lambda c, calls: Message(role="assistant", content=c, tool_calls=tuple(calls)),
              st.one_of(st.none(), _text), st.lists(_call, min_size=1, max_size=3)),
)
_secret_set = st.lists(st.sampled_from(SECRETS), max_size=3)


def _same(memo_out: ModelRequest, plain_out: ModelRequest, request: ModelRequest) -> None:
    assert list(memo_out.messages) == list(plain_out.messages)
    assert (memo_out is request) == (plain_out is request)
    for got, want, sent in zip(memo_out.messages, plain_out.messages, request.messages):
        assert (got is sent) == (want is sent)  # an unchanged message is passed on as it is


@settings(max_examples=300, deadline=None)
@given(history=st.lists(_message, max_size=12),
       steps=st.lists(st.tuples(_secret_set, st.lists(_message, max_size=3), st.booleans()), min_size=1, max_size=6))
def test_the_memo_redacts_exactly_like_the_plain_redaction_whatever_the_secret_set_did(history, steps):
    """A growing history sent again and again (the same objects, and equal
    copies), the secret set changing between calls (new Redactor each time,
    sometimes an earlier set again): every call's result is the plain one."""
    memo = RedactionMemo()
    for values, new, copy in steps:
        redactor = Redactor(values)
        history = history + new
        sent = [Message(role=m.role, content=m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id)
                if copy else m for m in history]
        request = ModelRequest(messages=tuple(sent))
        _same(memo.redact_request(request, redactor), redact_request(request, redactor.redact), request)


@settings(max_examples=100, deadline=None)
@given(st.lists(_message, min_size=1, max_size=20), st.integers(1, 6), st.integers(0, 60))
def test_a_memo_too_small_for_the_history_still_redacts_exactly(messages, max_messages, max_chars):
    memo = RedactionMemo(max_messages=max_messages, max_chars=max_chars)
    redactor = Redactor(SECRETS)
    request = ModelRequest(messages=tuple(messages))
    for _ in range(3):
        _same(memo.redact_request(request, redactor), redact_request(request, redactor.redact), request)
        assert len(memo) <= max_messages


def test_a_message_remembered_clean_is_redacted_once_its_secret_is_held():
    memo = RedactionMemo()
    history = (Message(role="user", content=f"my token is {TOKEN}"),
               Message(role="assistant", tool_calls=(ToolCall(id="a", name="t", arguments=json.dumps({"k": KEY})),)))
    request = ModelRequest(messages=history)
    with REGISTRY.hold(["unrelated-secret-value"]):
        assert memo.redact_request(request) is request  # nothing to hide yet: remembered as clean
        assert len(memo) == 2
    with REGISTRY.hold(["unrelated-secret-value", TOKEN]):
        out = memo.redact_request(request)
        assert out.messages[0].content == f"my token is {REDACTED}"
        assert out.messages[1] is history[1]
        with REGISTRY.hold([KEY]):
            assert json.loads(memo.redact_request(request).messages[1].tool_calls[0].arguments) == {"k": REDACTED}
        again = memo.redact_request(request)  # the set is the earlier one again: still redacted
        assert again.messages[0].content == f"my token is {REDACTED}" and again.messages[1] is history[1]


def test_a_request_without_any_held_secret_is_passed_on_unchanged():
    memo = RedactionMemo()
    request = ModelRequest(messages=(Message(role="user", content=TOKEN),))
    assert memo.redact_request(request, Redactor()) is request
    assert len(memo) == 0


def test_content_that_cannot_be_a_key_is_redacted_without_the_memo():
    memo = RedactionMemo()
    odd = Message(role="user", content=[TOKEN])  # not a str: left as it is
    request = ModelRequest(messages=(odd, Message(role="user", content=TOKEN)))
    out = memo.redact_request(request, Redactor([TOKEN]))
    assert out.messages[0] is odd and out.messages[1].content == REDACTED
    assert len(memo) == 1


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[ModelRequest] = []

    async def stream(self, request):
        self.seen.append(request)
        yield Completion(message=Message(role="assistant", content="ok"), finish_reason="stop")


async def test_the_model_wrapper_redacts_a_long_thread_against_the_secrets_held_at_each_call():
    inner = _Recorder()
    model = RedactingModel(inner)
    history = [Message(role="user", content=f"turn {i}: {TOKEN if i % 3 == 0 else 'plain'} {KEY}") for i in range(9)]
    with REGISTRY.hold([TOKEN]):
        for n in (3, 6, 9):
            [e async for e in model.stream(ModelRequest(messages=tuple(history[:n])))]
        with REGISTRY.hold([KEY]):
            [e async for e in model.stream(ModelRequest(messages=tuple(history)))]
    for request in inner.seen:
        sent = json.dumps([m.to_wire() for m in request.messages])
        assert TOKEN not in sent
    assert all(KEY in m.content for m in inner.seen[2].messages)
    assert not any(KEY in m.content for m in inner.seen[3].messages)


def test_the_bounded_memo_drops_the_least_recently_used_first_and_keeps_its_bounds():
    memo: BoundedMemo[str] = BoundedMemo(max_entries=3, max_weight=10)
    for key in "abc":
        memo.put(key, key.upper(), 2)
    assert memo.get("a") == "A"  # a is now the most recent
    memo.put("d", "D", 2)
    assert memo.get("b") is None and [memo.get(k) for k in "acd"] == ["A", "C", "D"]
    memo.put("e", "E", 5)  # weight 2 + 2 + 2 + 5 > 10: a (the oldest use) goes, then d fits
    assert len(memo) == 3 and memo.weight == 9 and memo.get("a") is None
    memo.put("huge", "H", 11)  # heavier than the bound: not kept
    assert memo.get("huge") is None and memo.weight == 9
    memo.put("c", "C2", 1)
    assert memo.get("c") == "C2" and memo.weight == 8
    memo.clear()
    assert len(memo) == 0 and memo.weight == 0
