"""Events a kernel run emits to its sink (``async def sink(event) -> None``).

The runtime persists messages and audit rows and forwards frames from these;
the kernel knows nothing of the database or the server.

Order within a run: for every model call, ``TokenEvent``\\ s as text streams,
then one ``ModelCallEvent`` (outcome and usage), then one
``AssistantMessageEvent``; for each of its tool calls a ``ToolStartEvent`` and later a ``ToolEndEvent`` (calls run concurrently, so
these interleave between calls); then one ``ToolResultMessageEvent`` per call
**in the calls' order**.  ``UserMessageEvent`` precedes the model call that
first sees the message.  A run ends with exactly one ``FinalEvent`` or
``ErrorEvent`` — except when it is cancelled, where it ends with the
``ToolEndEvent``/``ToolResultMessageEvent`` pairs (status ``cancelled``) of
the calls that were in flight, and nothing more.

Message events carry every message the run adds to the history, in history
order: persisting exactly those keeps the thread resumable.  The per-turn
reminder and the forced last-answer instruction are never in history and
never emitted.

Sink policy (see :class:`Emitter`): the kernel serialises calls to the sink
(never two at once); an exception raised by the sink is logged and the run
continues; ``trio.Cancelled`` raised inside the sink propagates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from ongridd.fifolock import FIFOLock
from ongridd.llm.types import Message, Usage
from ongridd.logs import get_logger
from ongridd.tools.spec import ToolResult

log = get_logger(__name__)


@attrs.frozen
class TokenEvent:
    """A piece of assistant text as it streams (including text before tool calls)."""

    text: str


@attrs.frozen
class UserMessageEvent:
    """A user-role message added to history.

    ``source``: ``"user"`` (the run's new user message), ``"inbox"`` (a
    message the user sent while the turn was running) or ``"kernel"`` (a note
    the kernel adds for the model, e.g. after a tool call written as text).
    """

    message: Message
    source: str = "user"


@attrs.frozen
class AssistantMessageEvent:
    """The assembled assistant message of one model call, as added to history."""

    message: Message


@attrs.frozen
class ToolStartEvent:
    """A tool call starts. ``arguments``: the raw text the model sent."""

    call_id: str
    name: str
    arguments: str


@attrs.frozen
class ToolEndEvent:
    """A tool call ended (one audit row). ``arguments``: raw text as the model sent it."""

    call_id: str
    name: str
    arguments: str
    result: ToolResult


@attrs.frozen
class ToolResultMessageEvent:
    """The ``role: tool`` message answering one call, as added to history."""

    message: Message


@attrs.frozen
class FinalEvent:
    """The run ended with an answer.

    ``status``: ``ok``, ``max_turns`` or ``tool_budget`` (see
    ``ongridd.kernel.loop.RunResult``).  ``text``: the final answer.
    ``detail``: why the run stopped when it is not ``ok``.
    """

    status: str
    text: str
    detail: str = ""


@attrs.frozen
class ModelCallEvent:
    """One model call ended (before its ``AssistantMessageEvent``).

    ``outcome``: ``ok`` (a completion arrived), ``error`` (the provider
    failed for good) or ``cancelled`` (the run was cancelled during the
    call; delivered under a bounded shield).  ``usage``: the token counts
    the provider reported, ``None`` when it reported none.  The runtime adds
    them to the session's counters."""

    outcome: str
    usage: Usage | None = None


@attrs.frozen
class ErrorEvent:
    """The run ended without an answer. ``code``: ``provider_error`` or ``internal``."""

    code: str
    message: str


KernelEvent = (
    TokenEvent | UserMessageEvent | AssistantMessageEvent | ToolStartEvent | ToolEndEvent
    | ToolResultMessageEvent | ModelCallEvent | FinalEvent | ErrorEvent
)
EventSink = Callable[[KernelEvent], Awaitable[None]]


class Emitter:
    """Delivers events to a sink one at a time (FIFO), tolerating a broken sink.

    ``await emitter(event)``: waits for the sink.  An ``Exception`` from the
    sink is logged (``kernel_sink_failed``) and swallowed — losing a frame or
    a row is better than losing the turn.  Cancellation propagates.
    :meth:`shielded` delivers under a bounded shield, for terminal events of
    a run that is being cancelled.
    """

    def __init__(self, sink: EventSink | None, *, session_id: str = "", agent: str = ""):
        self._sink = sink
        self._lock = FIFOLock()
        self._session_id = session_id
        self._agent = agent
        self._reached: dict[int, KernelEvent] = {}  # id → event, for the kinds recovery needs
        self.failures = 0

    def reached(self, event: KernelEvent) -> bool:
        """True once this very ``event`` object (an assistant message, tool end
        or tool message event) was handed to the sink, even if the sink then
        failed or was cancelled — recovery uses it to never send one twice."""
        return self._reached.get(id(event)) is event

    def _mark(self, event: KernelEvent) -> None:
        if isinstance(event, (AssistantMessageEvent, ToolEndEvent, ToolResultMessageEvent)):
            self._reached[id(event)] = event

    async def __call__(self, event: KernelEvent) -> None:
        if self._sink is None:
            self._mark(event)
            return
        # The lock without its schedule point when nobody holds it (a run emits
        # a score of events per model call; each trip through the scheduler
        # costs more than the sink): a cancelled caller still stops here.
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._lock.try_acquire():
            await self._lock.acquire()
        try:
            self._mark(event)
            try:
                await self._sink(event)
            except Exception:
                self.failures += 1
                log.exception("kernel_sink_failed", event_type=type(event).__name__,
                              session_id=self._session_id, agent=self._agent)
        finally:
            self._lock.release()

    async def shielded(self, events: list[KernelEvent], timeout_s: float = 5.0) -> None:
        """Deliver ``events`` even inside a cancelled scope, giving up after ``timeout_s``."""
        with trio.move_on_after(timeout_s, shield=True):
            for event in events:
                await self(event)
