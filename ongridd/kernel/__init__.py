"""The kernel: the ReAct loop of one persona run (docs/architecture.md §3 layer 4).

``run_agent(...)`` → :class:`RunResult`; events for the runtime's sink are in
:mod:`ongridd.kernel.events`.  The kernel knows nothing of the database or
the server.
"""

from ongridd.kernel.events import (
    AssistantMessageEvent,
    Emitter,
    ErrorEvent,
    EventSink,
    FinalEvent,
    KernelEvent,
    ModelCallEvent,
    TokenEvent,
    ToolEndEvent,
    ToolResultMessageEvent,
    ToolStartEvent,
    UserMessageEvent,
)
from ongridd.kernel.loop import RUN_STATUSES, RunResult, run_agent

__all__ = [
    "RUN_STATUSES",
    "AssistantMessageEvent",
    "Emitter",
    "ErrorEvent",
    "EventSink",
    "FinalEvent",
    "KernelEvent",
    "ModelCallEvent",
    "RunResult",
    "TokenEvent",
    "ToolEndEvent",
    "ToolResultMessageEvent",
    "ToolStartEvent",
    "UserMessageEvent",
    "run_agent",
]
