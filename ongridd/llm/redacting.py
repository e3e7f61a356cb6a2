"""A model client wrapper that keeps held secrets out of model traffic.

Every model call of the daemon (coordinator, workers, reviewers,
interjections) goes through the one client the runtime holds, so wrapping
that client is the single choke point for model requests.  The request's
messages (text and tool-call arguments) are redacted before they are sent;
the answer is redacted too (streamed text pieces, the final text and the
tool-call arguments), so a secret a model somehow produced is neither run,
stored, audited nor sent back to a model.

The wrapper also keeps the model metrics.  ``ongrid_model_calls_total{persona,
outcome}`` counts every call exactly once: ``ok`` (a completion arrived),
``error`` (the call failed for good) or ``cancelled`` (closed or cancelled
before its completion).  ``ongrid_model_retries_total{persona}`` counts the
failed attempts a provider retried (only providers with an ``on_retry`` hook
report those).  ``ongrid_model_tokens_total{persona,kind}`` adds the usage a
completion reported (``prompt``, ``completion``, ``cached``).  The
``persona`` label is the persona name only for personas ``known_agents()``
lists (else ``(unknown)``).

A long thread sends the same history on every call, so what redaction made
of each message is remembered (:class:`RedactionMemo`, bounded, least
recently used first): a call only scans the messages it has not seen with
the secret set held right now.  The memo belongs to one secret set (one
:class:`~ongridd.secretset.Redactor`); when the set changes it is emptied,
so a message is always redacted against every secret held when it is sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import attrs

from ongridd.llm.memo import BoundedMemo
from ongridd.llm.types import Completion, Message, ModelRequest, StreamEvent, TextDelta, ToolCall
from ongridd.metrics import MODEL_CALLS, MODEL_RETRIES, MODEL_TOKENS, labelled

#: model callers that are not personas but keep their own metric label
#: (the history budget's summary call, ongridd/runtime/compaction.py)
INTERNAL_AGENTS = frozenset({"summarizer"})
from ongridd.secretset import REGISTRY, Redactor, redact

#: the bounds of a :class:`RedactionMemo`: messages, and characters of their text
MEMO_MAX_MESSAGES = 8192
MEMO_MAX_CHARS = 8_000_000


def redact_message(message: Message, scrub: Callable[[Any], Any] = redact) -> Message:
    """``message`` with its content and tool calls' names, ids and arguments redacted (the
    same object when nothing changed)."""
    content = scrub(message.content)
    calls = tuple(_redact_call(c, scrub) for c in message.tool_calls)
    if content == message.content and all(a is b for a, b in zip(calls, message.tool_calls)):
        return message
    return attrs.evolve(message, content=content, tool_calls=calls)


def _redact_call(call: ToolCall, scrub: Callable[[Any], Any]) -> ToolCall:
    arguments = scrub(call.arguments)
    if type(arguments) is str and "\\" in arguments:
        arguments = _scrub_decoded(arguments, scrub)
    name = scrub(call.name)  # the model may write a secret into a tool's name, or its id, as well
    call_id = scrub(call.id)
    if arguments == call.arguments and name == call.name and call_id == call.id:
        return call
    return attrs.evolve(call, arguments=arguments, name=name, id=call_id)


def _scrub_decoded(text: str, scrub: Callable[[Any], Any]) -> str:
    """Arguments whose JSON escapes spell a secret the text itself does not show
    (``\\u0073k-…`` is read ``sk-…`` by the tool, a JSON reader, the next prompt): written
    again in the canonical form (``json.dumps``, no ASCII escapes) with the secret redacted.
    ``text`` itself when decoded it holds no secret either, or is not JSON (a tool refuses it)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    canonical = json.dumps(value, ensure_ascii=False)
    scrubbed = scrub(canonical)
    return text if scrubbed == canonical else scrubbed


def redact_request(request: ModelRequest, scrub: Callable[[Any], Any] = redact) -> ModelRequest:
    """``request`` with every message redacted (see :func:`redact_message`)."""
    messages = [redact_message(m, scrub) for m in request.messages]
    if all(a is b for a, b in zip(messages, request.messages)):
        return request
    return attrs.evolve(request, messages=messages)


#: in a memo, a message redaction left as it was
_UNCHANGED = (False, None, ())


def _rememberable(message: Message) -> bool:
    """Whether the memo may key ``message``: text content (or None) and tool calls with text
    arguments, so its weight counts all it holds (other content is redacted each time)."""
    content = message.content
    return (content is None or type(content) is str) and all(
        type(call.arguments) is str for call in message.tool_calls)


def _text_chars(message: Message) -> int:
    size = len(message.content) if isinstance(message.content, str) else 0
    for call in message.tool_calls:
        size += len(call.arguments) if isinstance(call.arguments, str) else 0
    return size


class RedactionMemo:
    """:func:`redact_request` with the process-wide secret set
    (:data:`~ongridd.secretset.REGISTRY`), remembering what it made of each
    message.

    The memo is keyed on what :func:`redact_message` reads of a message (its
    content and its tool calls), so an equal message sent again (the same
    history object, or a new one with the same text) costs one dictionary
    look-up.  It holds the results for one :class:`Redactor` only (a
    redactor is immutable; the registry builds a new one whenever the
    secret set changes): a request redacted with another one empties it
    first.  Bounded by ``max_messages`` and ``max_chars`` (the text of the
    messages kept and of their redacted forms), least recently used first;
    only messages with text (or no) content and text tool-call arguments
    are kept.  Safe from any thread (one
    lock per request).
    """

    def __init__(self, max_messages: int = MEMO_MAX_MESSAGES, max_chars: int = MEMO_MAX_CHARS):
        self._lock = threading.Lock()
        self._redactor: Redactor | None = None
        self._memo: BoundedMemo[tuple[bool, Any, tuple[ToolCall, ...]]] = BoundedMemo(max_messages, max_chars)

    def __len__(self) -> int:
        return len(self._memo)

    def redact_request(self, request: ModelRequest, redactor: Redactor | None = None) -> ModelRequest:
        """Exactly ``redact_request(request, redactor.redact)`` (``redactor``:
        default ``REGISTRY.redactor`` as it is now): ``request`` itself when no
        message changes, else a copy with the redacted messages (a message
        that did not change is the same object).  Never raises."""
        if redactor is None:
            redactor = REGISTRY.redactor
        if not redactor:  # no secret held: redaction changes nothing
            return request
        scrub = redactor.redact
        memo = self._memo
        messages: list[Message] = []
        changed = False
        with self._lock:
            if redactor is not self._redactor:
                memo.clear()
                self._redactor = redactor
            for message in request.messages:
                key: tuple[Any, ...] | None = None
                hit = None
                if _rememberable(message):
                    key = (message.content, message.tool_calls)
                    try:
                        hit = memo.get(key)
                    except TypeError:  # tool calls given as a list: not remembered
                        key = None
                if hit is None:
                    out = redact_message(message, scrub)
                    if key is not None:
                        if out is message:
                            memo.put(key, _UNCHANGED, _text_chars(message))
                        else:  # the redacted text is kept too (it may be longer: "[redacted]" for "pw")
                            memo.put(key, (True, out.content, out.tool_calls), _text_chars(message) + _text_chars(out))
                elif hit[0]:
                    out = attrs.evolve(message, content=hit[1], tool_calls=hit[2])
                else:
                    out = message
                changed = changed or out is not message
                messages.append(out)
        return attrs.evolve(request, messages=messages) if changed else request


class RedactingModel:
    """Wraps a ModelClient (``inner``): same protocol, redacted traffic.

    ``stream(request)`` yields the inner client's events with their text
    redacted; errors (``ProviderError``) and cancellation pass through
    unchanged.  A secret split across two streamed pieces is caught too: the
    end of a piece that could be the start of a held secret is kept back
    until the next piece (or the next other event) shows what follows; the
    final ``Completion`` is redacted whole.  ``inner`` may also be a zero-argument factory
    (called on first use, as the runtime does for the configured provider).
    With the default ``scrub``, requests are redacted through a
    :class:`RedactionMemo` (the same result; a long thread's history is not
    scanned again on every call).
    """

    def __init__(self, inner: Any, scrub: Callable[[Any], Any] = redact, *,
                 known_agents: Callable[[], Collection[str]] | None = None):
        self._inner = inner
        self._scrub = scrub
        self._known_agents = known_agents
        self._hooked = False
        self._memo = RedactionMemo()

    @property
    def inner(self) -> Any:
        if callable(self._inner) and not hasattr(self._inner, "stream"):
            self._inner = self._inner()
        if not self._hooked:
            self._hooked = True
            if getattr(self._inner, "on_retry", False) is None:
                self._inner.on_retry = lambda request: labelled(MODEL_RETRIES, self.agent_label(request.agent)).inc()
        return self._inner

    def _count(self, request: ModelRequest, outcome: str) -> None:
        """``request`` in ``ongrid_model_calls_total``; the label is
        ``(unknown)`` for a persona not in ``known_agents()`` (keeps the label
        set bounded)."""
        labelled(MODEL_CALLS, self.agent_label(request.agent), outcome).inc()

    def _count_tokens(self, request: ModelRequest, usage: Any) -> None:
        if usage is None:
            return
        persona = self.agent_label(request.agent)
        for kind, n in (("prompt", usage.prompt_tokens), ("completion", usage.completion_tokens),
                        ("cached", usage.cached_tokens)):
            if n:
                labelled(MODEL_TOKENS, persona, kind).inc(n)

    def agent_label(self, agent: str) -> str:
        """``agent`` when it is a loaded persona (or no ``known_agents`` was
        given), else ``(unknown)``: a metric label from a bounded set."""
        if self._known_agents is not None and agent not in INTERNAL_AGENTS:
            try:
                known = agent in self._known_agents()
            except Exception:  # noqa: BLE001 - a metric label must never fail the model call
                known = False
            if not known:
                return "(unknown)"
        return agent

    def __getattr__(self, name: str) -> Any:  # provider extras (model name, base_url, …)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        scrub = self._scrub
        inner = self.inner
        outgoing = self._memo.redact_request(request) if scrub is redact else redact_request(request, scrub)
        source = inner.stream(outgoing)
        settled = False
        held = ""  # streamed text that may be the start of a secret, kept until the next piece decides
        try:
            async for event in source:
                if isinstance(event, TextDelta):
                    raw = held + event.text  # held: unredacted text that may begin a secret
                    cut = REGISTRY.redactor.stream_cut(raw) if scrub is redact else len(raw)
                    held = raw[cut:]
                    out = scrub(raw[:cut])
                    if out:
                        yield event if out == event.text else TextDelta(out)
                    continue
                if held:  # anything else ends the run of text: send what was held, redacted
                    yield TextDelta(scrub(held))
                    held = ""
                if isinstance(event, Completion):
                    if not settled:
                        settled = True
                        self._count(request, "ok")
                        self._count_tokens(request, event.usage)
                    message = redact_message(event.message, scrub)
                    yield event if message is event.message else attrs.evolve(event, message=message)
                else:
                    yield event
            if held:
                yield TextDelta(scrub(held))
            if not settled:  # the stream ended without a completion: the call failed
                settled = True
                self._count(request, "error")
        except Exception:  # ProviderError or a provider bug; cancellation is a BaseException
            if not settled:
                settled = True
                self._count(request, "error")
            raise
        except BaseException:  # cancelled, or the caller closed the stream (GeneratorExit)
            if not settled:
                settled = True
                self._count(request, "cancelled")
            raise
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()

    async def aclose(self) -> None:
        inner = self._inner
        if hasattr(inner, "aclose") and hasattr(inner, "stream"):
            await inner.aclose()


__all__ = ["RedactingModel", "RedactionMemo", "redact_request", "redact_message"]
