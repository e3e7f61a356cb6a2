"""Assemble OpenAI chat-completion output into Ongrid's model events.

Two entry points, one for each response kind:

* :class:`StreamAssembler` consumes streamed ``chat.completion.chunk``
  objects (the ``openai`` SDK's ``ChatCompletionChunk`` or plain dicts of the
  same shape) and yields :class:`~ongridd.llm.types.TextDelta` events as text
  arrives, then builds one :class:`~ongridd.llm.types.Completion`.
* :func:`completion_from_response` does the same for one non-streamed
  ``chat.completion`` response.

Rules that real servers need:

* tool-call deltas are routed by their ``index``; ``id``, ``type`` and the
  function ``name`` usually come only on a call's first chunk, and a later
  chunk without them attaches to the call of its index — nothing is dropped.
  Calls may be interleaved (index 0, 1, 0, ...).  A chunk that carries a new,
  different ``id`` on an index already in use (a quirk of some servers that
  number every call 0) starts a new call;
* arguments are kept exactly as the model wrote them, invalid JSON included;
  ``""`` stays ``""`` (:meth:`ToolCall.to_wire` replays it as ``"{}"``);
* text content is kept together with tool calls;
* ``finish_reason`` is kept as the server sent it — ``length`` in the middle
  of a tool call leaves the partial call in the completion, and the kernel
  must not execute it;
* ``usage`` is kept when the server sends it (the last one wins), with
  ``prompt_tokens_details.cached_tokens`` as ``Usage.cached_tokens``;
* an answer whose text and tool arguments pass :data:`MAX_ANSWER_CHARS`
  raises ``ValueError`` (from ``feed`` as soon as it does);
* a tool call that ends without a function name raises ``ValueError`` from
  ``finish`` / :func:`completion_from_response`: it names nothing that could
  be run, answered or replayed (the provider reports a malformed answer).

Only choice 0 is read (Ongrid never asks for ``n > 1``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ongridd.llm.types import Completion, Message, TextDelta, ToolCall, Usage


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` for SDK objects; ``None`` if absent."""
    if type(obj) is dict:  # decoded JSON, nearly always: no ABC check (it is called per field of every chunk)
        return obj.get(key)
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _text(value: Any) -> str:
    """Content as text: strings as they are, content-part lists joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text(_get(part, "text")) for part in value)
    return str(value)


def _arguments_text(value: Any) -> str:
    """Arguments as raw text.  A server that sends a parsed object gets it
    serialised back; a string is kept byte for byte."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


#: the most characters of text and tool-call arguments one answer may carry: past any model's
#: output limit (about 500,000 tokens), and small enough that storing, encoding and sending it
#: stays short on the event loop; a longer answer is refused as malformed (ValueError)
MAX_ANSWER_CHARS = 2 * 1024 * 1024

#: the most tokens one call is believed to report per counter; a number
#: past it (or negative, or not an integer) is a provider's garbage and
#: counts 0 — it must not overflow a 64-bit counter and fail the row write
USAGE_MAX_TOKENS = 10**9


def _count(value: Any) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= USAGE_MAX_TOKENS
    return int(value) if ok else 0


def _usage(value: Any) -> Usage | None:
    if value is None:
        return None
    return Usage(
        prompt_tokens=_count(_get(value, "prompt_tokens")),
        completion_tokens=_count(_get(value, "completion_tokens")),
        cached_tokens=_count(_get(_get(value, "prompt_tokens_details"), "cached_tokens")),
    )


@attrs.define
class _PartialCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)


class StreamAssembler:
    """Builds one completion out of streamed chunks.

    Use: ``for event in assembler.feed(chunk): ...`` for every chunk (each
    call returns the :class:`TextDelta` events that chunk produced, possibly
    none), then ``assembler.finish()`` for the :class:`Completion`.  ``feed``
    accepts SDK chunk objects and plain dicts alike and never raises on odd
    shapes: missing fields count as absent.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: list[_PartialCall] = []  # in order of first appearance
        self._by_index: dict[int, _PartialCall] = {}
        self._last: _PartialCall | None = None
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._chars = 0  # text and arguments so far (MAX_ANSWER_CHARS)
        self.chunks = 0  #: number of chunks fed so far

    def feed(self, chunk: Any) -> list[TextDelta]:
        """Take one chunk; return the text deltas it carried (in order)."""
        self.chunks += 1
        usage = _usage(_get(chunk, "usage"))
        if usage is not None:
            self._usage = usage
        events: list[TextDelta] = []
        for choice in _get(chunk, "choices") or ():
            index = _get(choice, "index")
            if index not in (0, None):
                continue
            delta = _get(choice, "delta")
            text = _text(_get(delta, "content"))
            if text:
                self._count(len(text))
                self._text.append(text)
                events.append(TextDelta(text))
            for entry in _get(delta, "tool_calls") or ():
                self._add_tool_delta(entry)
            reason = _get(choice, "finish_reason")
            if reason:
                self._finish_reason = str(reason)
        return events

    def _add_tool_delta(self, entry: Any) -> None:
        index = _get(entry, "index")
        call_id = _get(entry, "id") or ""
        function = _get(entry, "function")
        name = _get(function, "name") or ""
        arguments = _arguments_text(_get(function, "arguments"))
        call = self._slot(index if isinstance(index, int) else None, call_id)
        if call_id and not call.id:
            call.id = str(call_id)
        if name and not call.name:
            call.name = str(name)
        if arguments:
            self._count(len(arguments))
            call.arguments.append(arguments)
        self._last = call

    def _count(self, chars: int) -> None:
        self._chars += chars
        _check_length(self._chars)

    def _slot(self, index: int | None, call_id: str) -> _PartialCall:
        if index is None:
            # No index (non-conforming server): a new id starts a call,
            # otherwise the delta continues the call touched last.
            if self._last is not None and (not call_id or call_id == self._last.id):
                return self._last
            index = max(self._by_index, default=-1) + 1
        call = self._by_index.get(index)
        if call is not None and call_id and call.id and call_id != call.id:
            # Same index, a different id: another call (servers that put
            # every call at index 0).  Re-key the old call out of the way.
            self._by_index[-len(self._calls) - 1] = call
            call = None
        if call is None:
            call = _PartialCall(index=index)
            self._by_index[index] = call
            self._calls.append(call)
        return call

    def finish(self) -> Completion:
        """The assembled completion.

        ``message.content`` is the concatenated text, or ``None`` when there
        is no text and at least one tool call.  Tool calls come in order of
        first appearance (which is index order for conforming servers); a
        call that never got an id is given ``call_<n>`` so the kernel can
        answer it.
        """
        text = "".join(self._text)
        calls = tuple(
            ToolCall(id=c.id or f"call_{n}", name=c.name, arguments="".join(c.arguments))
            for n, c in enumerate(self._calls)
        )
        _check_named(calls)
        content: str | None = text if (text or not calls) else None
        return Completion(
            message=Message(role="assistant", content=content, tool_calls=calls),
            finish_reason=self._finish_reason,
            usage=self._usage,
        )


def _check_length(chars: int) -> None:
    """ValueError when an answer's text and tool arguments, ``chars`` characters, pass MAX_ANSWER_CHARS."""
    if chars > MAX_ANSWER_CHARS:
        raise ValueError(f"an answer longer than {MAX_ANSWER_CHARS:,} characters (text and tool arguments)")


def _check_named(calls: Sequence[ToolCall]) -> None:
    """A tool call without a function name names nothing that could be run, answered or
    replayed: ValueError (the provider reports the answer as malformed)."""
    for call in calls:
        if not call.name:
            raise ValueError(f"a tool call without a function name (call {call.id!r})")


def completion_from_response(response: Any) -> Completion:
    """A :class:`Completion` from one non-streamed ``chat.completion``.

    ``response``: the SDK's ``ChatCompletion`` or a dict of the same shape.
    The same rules as :class:`StreamAssembler` apply (raw arguments, text kept
    with tool calls, ``finish_reason`` and ``usage`` as sent).  A response
    without choices gives an empty assistant message with
    ``finish_reason=None``.
    """
    choices = _get(response, "choices") or ()
    choice = next((c for c in choices if _get(c, "index") in (0, None)), None)
    message = _get(choice, "message")
    text = _text(_get(message, "content"))
    calls = []
    for n, entry in enumerate(_get(message, "tool_calls") or ()):
        function = _get(entry, "function")
        calls.append(
            ToolCall(
                id=str(_get(entry, "id") or f"call_{n}"),
                name=str(_get(function, "name") or ""),
                arguments=_arguments_text(_get(function, "arguments")),
            )
        )
    _check_named(calls)
    _check_length(len(text) + sum(len(c.arguments) for c in calls))
    content: str | None = text if (text or not calls) else None
    reason = _get(choice, "finish_reason")
    return Completion(
        message=Message(role="assistant", content=content, tool_calls=tuple(calls)),
        finish_reason=str(reason) if reason else None,
        usage=_usage(_get(response, "usage")),
    )
