"""In-memory doubles for kernel tests: a scripted ModelClient, a persona,
tools, and an event recorder."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from ongridd.errors import ProviderError
from ongridd.kernel import events as ev
from ongridd.llm.types import (
    Completion,
    Message,
    ModelRequest,
    TextDelta,
    ToolCall,
    Usage,
)
from ongridd.tools.spec import Proposal, Tool, ToolCallContext


@attrs.define
class Persona:
    name: str = "default"
    max_turns: int = 15
    tool_budget: int | None = None
    model: str | None = None
    tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    permission_mode: str = "default"

    @property
    def read_only(self) -> bool:
        return self.permission_mode == "read-only"


def say(text: str, finish: str = "stop") -> Completion:
    return Completion(message=Message(role="assistant", content=text), finish_reason=finish,
                      usage=Usage(prompt_tokens=10, completion_tokens=5))


def call(name: str, arguments: Any = None, id: str | None = None) -> ToolCall:
    raw = arguments if isinstance(arguments, str) else ("" if arguments is None else json.dumps(arguments))
    return ToolCall(id=id or f"call_{name}", name=name, arguments=raw)


def calls(*tool_calls: ToolCall, content: str | None = None, finish: str = "tool_calls") -> Completion:
    return Completion(message=Message(role="assistant", content=content, tool_calls=tuple(tool_calls)),
                      finish_reason=finish, usage=Usage(prompt_tokens=10, completion_tokens=5))


class ScriptedModel:
    """A ModelClient answering each call with the next step.

    A step is a ``Completion`` (its text is streamed in 16-char deltas first),
    an exception instance (raised), or an async callable ``step(request)``
    returning one of those.  ``requests`` records every request.
    """

    def __init__(self, steps: list[Any]):
        self.steps = list(steps)
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest):
        self.requests.append(request)
        if not self.steps:
            raise ProviderError(f"script used up for {request.agent}", status=400)
        step = self.steps.pop(0)
        if callable(step):
            step = await step(request)
        if isinstance(step, BaseException):
            raise step
        content = step.message.content or ""
        for i in range(0, len(content), 16):
            yield TextDelta(content[i:i + 16])
        yield step

    async def aclose(self) -> None:
        pass


class Recorder:
    """An event sink that keeps every event."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def __call__(self, event: Any) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def messages(self) -> list[Message]:
        kinds = (ev.UserMessageEvent, ev.AssistantMessageEvent, ev.ToolResultMessageEvent)
        return [e.message for e in self.events if isinstance(e, kinds)]


def make_tool(name: str, handler: Callable | None = None, *, properties: dict | None = None,
              required: tuple[str, ...] = (), tool_class: str = "read", timeout_s: float = 15.0,
              **extra: Any) -> Tool:
    async def default(args: dict, ctx: ToolCallContext) -> Any:
        return {"tool": name, "args": args}

    params: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required:
        params["required"] = list(required)
    if tool_class in ("write", "destructive") or extra.get("classify"):
        params["properties"].setdefault("reason", {"type": "string"})
        if tool_class in ("write", "destructive"):
            params.setdefault("required", []).append("reason")
        extra.setdefault("describe", lambda a: Proposal(action=name, target="local"))
    return Tool(name=name, description=f"{name} for tests", parameters=params, handler=handler or default,
                tool_class=tool_class, timeout_s=timeout_s, **extra)


AGENT_TOOL_PARAMS = {
    "description": {"type": "string"},
    "subagent_type": {"type": "string"},
    "prompt": {"type": "string"},
}


def context(agent: str = "default", session_id: str = "s-1", read_only: bool = False) -> ToolCallContext:
    return ToolCallContext(session_id=session_id, agent=agent, read_only=read_only)


def tool_messages(request: ModelRequest) -> list[Message]:
    return [m for m in request.messages if m.role == "tool"]


def error_of(message: Message) -> str:
    body = json.loads(message.content)
    assert body["status"] in ("error", "timeout", "cancelled"), body
    return body["error"]

