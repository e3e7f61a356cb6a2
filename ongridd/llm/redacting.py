"""A model client wrapper that keeps held secrets out of model traffic.

Every model call of the daemon (coordinator, workers, reviewers,
interjections) goes through the one client the runtime holds, so wrapping
that client is the single choke point for model requests.  The request's
messages (text and tool-call arguments) are redacted before they are sent;
the answer is redacted too (streamed text pieces, the final text and the
tool-call arguments), so a secret a model somehow produced is neither run,
stored, audited nor sent back to a model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs

from ongridd.llm.types import Completion, Message, ModelRequest, StreamEvent, TextDelta, ToolCall
from ongridd.secretset import redact


def redact_message(message: Message, scrub: Callable[[Any], Any] = redact) -> Message:
    """``message`` with its content and tool-call arguments redacted (the
    same object when nothing changed)."""
    content = scrub(message.content)
    calls = tuple(_redact_call(c, scrub) for c in message.tool_calls)
    if content == message.content and all(a is b for a, b in zip(calls, message.tool_calls)):
        return message
    return attrs.evolve(message, content=content, tool_calls=calls)


def _redact_call(call: ToolCall, scrub: Callable[[Any], Any]) -> ToolCall:
    arguments = scrub(call.arguments)
    return call if arguments == call.arguments else attrs.evolve(call, arguments=arguments)


def redact_request(request: ModelRequest, scrub: Callable[[Any], Any] = redact) -> ModelRequest:
    """``request`` with every message redacted (see :func:`redact_message`)."""
    messages = [redact_message(m, scrub) for m in request.messages]
    if all(a is b for a, b in zip(messages, request.messages)):
        return request
    return attrs.evolve(request, messages=messages)


class RedactingModel:
    """Wraps a ModelClient (``inner``): same protocol, redacted traffic.

    ``stream(request)`` yields the inner client's events with their text
    redacted; errors (``ProviderError``) and cancellation pass through
    unchanged.  A secret split across two streamed pieces is not caught in
    the pieces (they only go to the chat client); the final ``Completion``
    is always redacted whole.  ``inner`` may also be a zero-argument factory
    (called on first use, as the runtime does for the configured provider).
    """

    def __init__(self, inner: Any, scrub: Callable[[Any], Any] = redact):
        self._inner = inner
        self._scrub = scrub

    @property
    def inner(self) -> Any:
        if callable(self._inner) and not hasattr(self._inner, "stream"):
            self._inner = self._inner()
        return self._inner

    def __getattr__(self, name: str) -> Any:  # provider extras (model name, base_url, …)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        scrub = self._scrub
        source = self.inner.stream(redact_request(request, scrub))
        try:
            async for event in source:
                if isinstance(event, TextDelta):
                    text = scrub(event.text)
                    yield event if text == event.text else TextDelta(text)
                elif isinstance(event, Completion):
                    message = redact_message(event.message, scrub)
                    yield event if message is event.message else attrs.evolve(event, message=message)
                else:
                    yield event
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()

    async def aclose(self) -> None:
        inner = self._inner
        if hasattr(inner, "aclose") and hasattr(inner, "stream"):
            await inner.aclose()


__all__ = ["RedactingModel", "redact_request", "redact_message"]
