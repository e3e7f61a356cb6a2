"""Model protocol value types (layer 3).

Messages follow the OpenAI chat wire shape.  ``ToolCall.arguments`` is the
raw text the model produced (it may be invalid JSON); the kernel parses it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import attrs


@attrs.frozen(kw_only=True)
class ToolCall:
    """One tool call as the model produced it. ``arguments``: raw text."""

    id: str
    name: str
    arguments: str = ""

    def to_wire(self) -> dict[str, Any]:
        # An empty argument string is replayed as "{}" (some servers reject "").
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments if self.arguments.strip() else "{}"},
        }


@attrs.frozen(kw_only=True)
class Message:
    """One chat message. ``role``: system|user|assistant|tool.

    ``content`` is ``None`` only for an assistant message that carries tool
    calls and no text (the one form we replay; ``""`` is normalised to
    ``None`` there).  ``tool_call_id`` is set on ``role == "tool"``.
    """

    role: str
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # tool name on role=tool messages (not sent on the wire)

    def to_wire(self) -> dict[str, Any]:
        """The message as the OpenAI chat API expects it."""
        out: dict[str, Any] = {"role": self.role}
        if self.role == "assistant" and self.tool_calls:
            out["content"] = self.content if self.content else None
            out["tool_calls"] = [c.to_wire() for c in self.tool_calls]
        else:
            out["content"] = self.content if self.content is not None else ""
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out


@attrs.frozen(kw_only=True)
class Usage:
    """Token counts one model call reported (or a sum of them).

    ``prompt_tokens``: input tokens (``cached_tokens`` included);
    ``completion_tokens``: output tokens; ``cached_tokens``: input tokens the
    provider served from its prompt cache (OpenAI's
    ``prompt_tokens_details.cached_tokens``; 0 when not reported)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@attrs.frozen(kw_only=True)
class ModelRequest:
    """One model call.

    ``messages``: the whole request (system prompt first, the per-turn
    reminder last).  ``tools``: OpenAI tool schemas.  ``model``: model name
    or ``None`` for the provider default.  ``agent`` and ``session_id`` go to
    the ``X-Ongrid-Agent`` / ``X-Ongrid-Session`` headers.
    """

    messages: Sequence[Message]
    tools: Sequence[dict[str, Any]] = ()
    model: str | None = None
    agent: str = "default"
    session_id: str = ""


# ---- stream events -------------------------------------------------------


@attrs.frozen
class TextDelta:
    """A piece of assistant text as it streams."""

    text: str


@attrs.frozen(kw_only=True)
class Completion:
    """The assembled end of one model call (always the last event).

    ``message``: the assistant message (content and tool calls, arguments as
    raw text).  ``finish_reason``: as the server said (``stop``,
    ``tool_calls``, ``length``, ...).  ``usage``: token counts when the server
    sent them.
    """

    message: Message
    finish_reason: str | None = None
    usage: Usage | None = None


StreamEvent = TextDelta | Completion


class ModelClient(Protocol):
    """A model provider.

    ``stream(request)`` yields ``TextDelta`` events then exactly one
    ``Completion``.  Raises :class:`ongridd.errors.ProviderError` after its
    retries are used up.  Cancellation: closing the iteration (or cancelling
    the task) aborts the HTTP request promptly.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...
