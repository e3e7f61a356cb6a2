"""Answer the tool calls of one assistant message (docs/architecture.md §8).

All calls of a message run concurrently in one nursery (a message with one
call runs it in the calling task); each gets exactly one result, and the
``role: tool`` messages are emitted (and returned) in the calls' order.
Calls past the run's tool budget, or all calls of an output cut at the
length limit, are answered "not run" without executing.

If the step is interrupted (cancellation), :meth:`ToolStep.recover` gives
every call that still lacks one its audit event (status ``cancelled``) and
its tool message, under a bounded shield, so the persisted history stays
valid; the caller then lets the cancellation propagate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ongridd.kernel.events import (
    Emitter,
    KernelEvent,
    ToolEndEvent,
    ToolResultMessageEvent,
    ToolStartEvent,
)
from ongridd.llm.types import Message, ToolCall
from ongridd.logs import get_logger
from ongridd.tools.runner import ToolRunner, error_text
from ongridd.tools.spec import ToolCallContext, ToolResult

log = get_logger(__name__)


def tool_message(call: ToolCall, result: ToolResult) -> Message:
    """The ``role: tool`` message answering ``call``."""
    return Message(role="tool", content=result.content, tool_call_id=call.id, name=call.name)


class ToolStep:
    """The answers to one assistant message's ``calls``.

    Event order: ``ToolStartEvent``/``ToolEndEvent`` per executed call (they
    interleave between concurrent calls; a call not run gets only a
    ``ToolEndEvent``), then one ``ToolResultMessageEvent`` per call in order.
    """

    def __init__(self, calls: Sequence[ToolCall], *, runner: ToolRunner, context: ToolCallContext, emit: Emitter):
        self.calls = tuple(calls)
        self.runner = runner
        self.context = context
        self.emit = emit
        n = len(self.calls)
        self.results: list[ToolResult | None] = [None] * n
        self._started: list[float | None] = [None] * n
        self._notes: list[dict[str, Any]] = [{} for _ in range(n)]
        self._end_events: list[ToolEndEvent | None] = [None] * n
        self._message_events: list[ToolResultMessageEvent | None] = [None] * n
        self._answered = 0  # tool messages emitted so far (in order)

    async def run(self, *, budget_left: int | None, budget_reason: str = "") -> list[Message]:
        """Run the first ``budget_left`` calls (all when ``None``) concurrently,
        answer the rest with ``budget_reason``; return the tool messages.
        Raises only on cancellation (call :meth:`recover` then)."""
        n = len(self.calls)
        limit = n if budget_left is None else max(0, min(n, budget_left))
        try:
            if limit == 1:  # the common case: nothing to run concurrently, no nursery and task to pay for
                await self._one(0)
            else:
                # the starts go out in the model's order (the console's chips, the audit's reader);
                # the calls then run concurrently, their tasks scheduled in any order
                for i in range(limit):
                    await self._start(i)
                async with trio.open_nursery() as nursery:
                    for i in range(limit):
                        nursery.start_soon(self._one, i, False)
        except BaseExceptionGroup as group:
            # A cancelled run leaves the nursery as a group of Cancelled under
            # strict exception groups; callers are promised a plain Cancelled.
            cancelled = _only_cancelled(group)
            if cancelled is not None:
                raise cancelled from None
            raise
        for i in range(limit, n):
            await self._end(i, self.runner.not_run_result(self.calls[i], budget_reason))
        return await self._answer()

    async def answer_without_running(self, reason: str) -> list[Message]:
        """Answer every call with an error result saying why it was not run."""
        for i, call in enumerate(self.calls):
            await self._end(i, self.runner.not_run_result(call, reason))
        return await self._answer()

    async def recover(self, reason: str = "the run was stopped before it finished") -> None:
        """Give every call that lacks them its end event (``cancelled``) and its
        tool message; works inside a cancelled scope (bounded shield, 5 s)."""
        events: list[KernelEvent] = []
        for i, call in enumerate(self.calls):
            if self.results[i] is None:
                self.results[i] = self.runner.cancelled_result(call, self._started[i], reason, self._notes[i])
            end = self._end_events[i]
            if end is None or not self.emit.reached(end):
                events.append(ToolEndEvent(call.id, call.name, call.arguments, self.results[i]))  # type: ignore[arg-type]
        for i in range(self._answered, len(self.calls)):
            sent = self._message_events[i]
            if sent is not None and self.emit.reached(sent):
                continue  # cancelled inside the sink: it has the message
            events.append(ToolResultMessageEvent(self._message(i)))
        await self.emit.shielded(events)

    # ---- internals ------------------------------------------------------

    async def _start(self, i: int) -> None:
        call = self.calls[i]
        self._started[i] = time.perf_counter()
        await self.emit(ToolStartEvent(call.id, call.name, call.arguments))

    async def _one(self, i: int, announce: bool = True) -> None:
        call = self.calls[i]
        if announce:
            await self._start(i)
        ctx = attrs.evolve(self.context, call_id=call.id, notes=self._notes[i])
        try:
            result = await self.runner.run(call, ctx)
        except Exception as exc:  # the runner turns failures into results; this guards against its bugs
            log.exception("tool_runner_failed", tool=call.name)
            result = ToolResult(call_id=call.id, name=call.name, status="error",
                                content=error_text(f"{call.name} failed: {type(exc).__name__}: {exc}"))
        await self._end(i, result)

    async def _end(self, i: int, result: ToolResult) -> None:
        call = self.calls[i]
        self.results[i] = result
        event = ToolEndEvent(call.id, call.name, call.arguments, result)
        self._end_events[i] = event
        await self.emit(event)

    def _message(self, i: int) -> Message:
        """Call ``i``'s tool message.  Once the turn is tainted (a call carried or printed a piece of
        a held secret) every result of this step is the same refusal in the model's view: calls that
        ran side by side would otherwise each tell it whether what it had printed was a piece (the
        audit keeps what each call did)."""
        result = self.results[i]
        assert result is not None
        if self.runner.taint.seen:
            result = self.runner.secret_refusal(self.calls[i])
        return tool_message(self.calls[i], result)

    async def _answer(self) -> list[Message]:
        messages = [self._message(i) for i in range(len(self.calls))]
        for i in range(self._answered, len(messages)):
            event = ToolResultMessageEvent(messages[i])
            self._message_events[i] = event
            await self.emit(event)
            self._answered += 1
        return messages


def _only_cancelled(group: BaseExceptionGroup) -> trio.Cancelled | None:
    """The first ``trio.Cancelled`` when every leaf of ``group`` is one."""
    first: trio.Cancelled | None = None
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        elif isinstance(exc, trio.Cancelled):
            first = first or exc
        else:
            return None
    return first
