"""The ReAct loop of one persona run (docs/architecture.md §7, §8).

:func:`run_agent` calls the model, runs the tools it asks for, and repeats
until a final answer or a limit.  It never raises for anything a model or a
provider does; the outcome is a :class:`RunResult` whose ``status`` says how
the run ended.  Cancellation (``trio.Cancelled``) is the only exception that
leaves it, promptly.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any

import attrs

from ongridd.errors import ProviderError
from ongridd.kernel import notes
from ongridd.kernel.events import (
    AssistantMessageEvent,
    Emitter,
    ErrorEvent,
    EventSink,
    FinalEvent,
    ModelCallEvent,
    TokenEvent,
    UserMessageEvent,
)
from ongridd.kernel.tool_step import ToolStep
from ongridd.llm.types import (
    Completion,
    Message,
    ModelClient,
    ModelRequest,
    TextDelta,
    ToolCall,
    Usage,
)
from ongridd.logs import get_logger
from ongridd.tools.bag import ToolBag
from ongridd.tools.runner import DEFAULT_MAX_RESULT_CHARS, ToolRunner
from ongridd.tools.spec import TOOL_NAME_RE, ToolCallContext

log = get_logger(__name__)

#: how a run can end (``RunResult.status``)
RUN_STATUSES = ("ok", "max_turns", "tool_budget", "provider_error", "error")

TextToolCallDetector = Callable[[str | None, Collection[str] | None], str | None]


@attrs.frozen(kw_only=True)
class RunResult:
    """How a run ended.

    ``status``: ``ok`` (a final answer), ``max_turns`` / ``tool_budget`` (a
    limit was reached; ``text`` is the best-effort answer of one last model
    call made without tools), ``provider_error`` (the model provider failed
    after its retries; ``detail`` has the message, ``text`` is empty) or
    ``error`` (an unexpected internal error, logged).  ``text``: the final
    answer.  ``messages_added``: every message appended to the history, in
    order (the new user message first when one was given).  ``turns``: model
    calls counted against ``max_turns`` (the forced last call is not).
    ``tool_calls``: tool calls counted against ``tool_budget`` (every call
    the model made, including invalid ones; not those left unrun because the
    output was cut).  ``usage``: summed token counts.  ``detail``: why the
    run stopped when ``status`` is not ``ok`` (also set for an ``ok`` run
    whose answer is empty, was cut at the output limit or stopped by the
    provider's content filter).  ``finish_reason``: what the provider said
    about the model call that produced ``text`` (``stop``, ``length``,
    ``content_filter``, …; ``None`` when no answer was produced or the
    provider said nothing) — the review gate approves only after ``stop``.
    """

    status: str
    text: str = ""
    messages_added: tuple[Message, ...] = ()
    turns: int = 0
    tool_calls: int = 0
    usage: Usage = attrs.field(factory=Usage)
    detail: str = ""
    finish_reason: str | None = None


class _ModelFailed(Exception):
    pass


def _default_detector() -> TextToolCallDetector:
    from ongridd.llm.textcalls import detect_text_tool_call

    return detect_text_tool_call


def _user_message(value: Message | str) -> Message:
    if isinstance(value, Message):
        return value
    return Message(role="user", content=str(value))


#: the name a tool call gets when the model's name for it cannot be a tool's (see
#: :func:`_assistant_message`); no tool has it, so the call is refused as an unknown tool
INVALID_TOOL_NAME = "invalid_tool_name"


#: the tool-call ids kept as the model wrote them; any other id (too long, markup, invisible or
#: bidirectional characters, a held secret) is replaced
CALL_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _assistant_message(completion: Completion, turn: int, seen: set[str] | None = None) -> Message:
    """The assistant message as stored: tool calls with unique ids, and a name that is no
    tool's name (one outside ``TOOL_NAME_RE``: too long, bidirectional or invisible characters,
    markup, spaces) replaced by :data:`INVALID_TOOL_NAME` before it is stored, audited, shown or
    sent back — it names nothing that could run, and whatever it spells must not pose as a tool
    in the console, the audit or the next prompt; an id outside :data:`CALL_ID_RE`, or one
    already used in this message or in ``seen`` (the ids of the run's history: a reused id would
    leave a call without its result in every later request), replaced by ``call_ongrid_<turn>_<i>``
    (made unique; ``seen`` gets every id kept); ``content`` ``None`` when there are tool calls and
    no text (``""`` and null are stored the same way), ``""`` at least otherwise."""
    raw = completion.message
    calls: list[ToolCall] = []
    seen = set() if seen is None else seen
    for i, call in enumerate(raw.tool_calls):
        call_id = call.id
        if not (isinstance(call_id, str) and CALL_ID_RE.fullmatch(call_id)) or call_id in seen:
            call_id = f"call_ongrid_{turn}_{i}"
            k = 1
            while call_id in seen:
                call_id, k = f"call_ongrid_{turn}_{i}_{k}", k + 1
            call = attrs.evolve(call, id=call_id)
        seen.add(call_id)
        if call.arguments is None:
            call = attrs.evolve(call, arguments="")
        if not (isinstance(call.name, str) and TOOL_NAME_RE.match(call.name)):
            call = attrs.evolve(call, name=INVALID_TOOL_NAME)
        calls.append(call)
    content = raw.content
    if calls:
        content = content or None
    else:
        content = content or ""
    return Message(role="assistant", content=content, tool_calls=tuple(calls))


@contextlib.asynccontextmanager
async def _closing(stream: Any) -> AsyncIterator[Any]:
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


class _Run:
    """The state of one run; :meth:`run` is the loop."""

    def __init__(self, *, model: ModelClient, persona: Any, system_prompt: str, history: Sequence[Message],
                 bag: ToolBag, runner: ToolRunner, reminder: str | Callable[[], str | None] | None,
                 context: ToolCallContext,
                 emit: Emitter, pending_user_messages: Callable[[], Sequence[Message | str]] | None,
                 detector: TextToolCallDetector):
        self.model = model
        self.persona = persona
        self.system_prompt = system_prompt
        self.history: list[Message] = list(history)
        #: every tool-call id in the history and this run (a reused id is replaced: _assistant_message)
        self.call_ids: set[str] = {c.id for m in self.history for c in m.tool_calls if isinstance(c.id, str)}
        self.bag = bag
        self.runner = runner
        self.reminder = reminder
        self.context = context
        self.emit = emit
        self.pending = pending_user_messages
        self.detector = detector
        self.max_turns = max(1, int(getattr(persona, "max_turns", 15) or 15))
        budget = getattr(persona, "tool_budget", None)
        self.tool_budget: int | None = int(budget) if budget else None
        self.added: list[Message] = []
        self.turns = 0
        self.tool_calls = 0
        self.text_tool_calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0

    # ---- history ----------------------------------------------------------

    async def add_user(self, message: Message, source: str) -> None:
        self.history.append(message)
        self.added.append(message)
        await self.emit(UserMessageEvent(message, source))

    async def add_assistant(self, message: Message) -> None:
        self.history.append(message)
        self.added.append(message)
        await self.emit(AssistantMessageEvent(message))

    def add_tool_messages(self, messages: Sequence[Message]) -> None:
        self.history.extend(messages)
        self.added.extend(messages)

    async def drain_inbox(self) -> None:
        if self.pending is None:
            return
        try:
            incoming = list(self.pending() or ())
        except Exception:
            log.exception("kernel_inbox_failed", session_id=self.context.session_id)
            return
        for item in incoming:
            await self.add_user(_user_message(item), "inbox")

    # ---- model ------------------------------------------------------------

    def request(self, *, tools: bool, extra: str | None = None) -> ModelRequest:
        messages: list[Message] = []
        if self.system_prompt:
            messages.append(Message(role="system", content=self.system_prompt))
        messages.extend(self.history)
        if extra:
            messages.append(Message(role="user", content=extra))
        reminder = self.current_reminder()
        if reminder:
            messages.append(Message(role="user", content=reminder))
        return ModelRequest(
            messages=tuple(messages),
            tools=self.bag.schemas() if tools else (),
            model=getattr(self.persona, "model", None) or None,
            agent=self.persona.name,
            session_id=self.context.session_id,
        )

    def current_reminder(self) -> str | None:
        """The reminder for the next request: ``reminder`` itself, or what
        the callable returns now (a failing callable is logged and the
        request goes without a reminder)."""
        value = self.reminder
        if callable(value):
            try:
                value = value()
            except Exception:
                log.exception("kernel_reminder_failed", agent=self.persona.name)
                return None
        if not isinstance(value, str) or not value.strip():
            return None
        return notes.wrap_reminder(value)

    async def call_model(self, request: ModelRequest) -> Completion:
        """Stream one model call, forwarding text; raises _ModelFailed."""
        completion: Completion | None = None
        try:
            async with _closing(self.model.stream(request)) as stream:
                async for event in stream:
                    if isinstance(event, TextDelta):
                        if event.text:
                            await self.emit(TokenEvent(event.text))
                    elif isinstance(event, Completion):
                        completion = event
        except ProviderError as exc:
            await self.emit(ModelCallEvent("error"))
            raise _ModelFailed(str(exc) or type(exc).__name__) from exc
        except Exception as exc:  # a provider bug or an unwrapped transport error
            log.exception("kernel_model_call_failed", agent=self.persona.name)
            await self.emit(ModelCallEvent("error"))
            raise _ModelFailed(f"model call failed: {type(exc).__name__}: {exc}") from exc
        except BaseException:  # cancelled mid-call: the call still counts (bounded shield)
            await self.emit.shielded([ModelCallEvent("cancelled", completion.usage if completion else None)])
            raise
        if completion is None:
            await self.emit(ModelCallEvent("error"))
            raise _ModelFailed("the model stream ended without a completion")
        usage = completion.usage
        if usage is not None:
            self.prompt_tokens += usage.prompt_tokens or 0
            self.completion_tokens += usage.completion_tokens or 0
            self.cached_tokens += usage.cached_tokens or 0
        await self.emit(ModelCallEvent("ok", usage))
        return completion

    # ---- loop -------------------------------------------------------------

    def result(self, status: str, text: str = "", detail: str = "",
               finish_reason: str | None = None) -> RunResult:
        return RunResult(
            status=status, text=text, messages_added=tuple(self.added), turns=self.turns,
            tool_calls=self.tool_calls, detail=detail, finish_reason=finish_reason,
            usage=Usage(prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                        cached_tokens=self.cached_tokens),
        )

    def limit_reached(self) -> str | None:
        if self.tool_budget is not None and self.tool_calls >= self.tool_budget:
            return "tool_budget"
        if self.turns >= self.max_turns:
            return "max_turns"
        return None

    async def run(self, user_message: Message | str | None) -> RunResult:
        if user_message is not None:
            await self.add_user(_user_message(user_message), "user")
        while True:
            await self.drain_inbox()
            reason = self.limit_reached()
            if reason is not None:
                return await self.forced_answer(reason)
            self.turns += 1
            completion = await self.call_model(self.request(tools=True))
            message = _assistant_message(completion, self.turns, self.call_ids)
            if message.tool_calls:
                await self.tool_turn(message, cut=completion.finish_reason == "length")
                continue
            await self.add_assistant(message)
            tried = self.detector(message.content, tuple(self.bag.tools) + tuple(self.bag.stubs))
            if tried is not None:
                self.text_tool_calls += 1
                log.info("kernel_text_tool_call", agent=self.persona.name, tool=tried)
                from ongridd.llm.textcall_report import report_text_tool_call

                report_text_tool_call(self.persona, self.model, tried, session_id=self.context.session_id)
                await self.add_user(Message(role="user", content=notes.text_tool_call_note(tried)), "kernel")
                continue
            text = message.content or ""
            detail = ""
            if completion.finish_reason == "length":
                detail = "the answer was cut at the model's output limit"
            elif completion.finish_reason == "content_filter":
                detail = "the provider's content filter stopped the answer"
            elif not text.strip():
                detail = "the model returned an empty answer"
            return await self.finish("ok", text, detail, completion.finish_reason)

    async def tool_turn(self, message: Message, *, cut: bool) -> None:
        """Store the assistant message and answer each of its tool calls.

        If cancelled anywhere after the assistant message reached the sink,
        every call still gets a (``cancelled``) tool message before the
        cancellation goes on, so the stored history stays valid."""
        calls = message.tool_calls
        step = ToolStep(calls, runner=self.runner, context=self.context, emit=self.emit)
        event = AssistantMessageEvent(message)
        try:
            self.history.append(message)
            self.added.append(message)
            await self.emit(event)
            if cut:
                messages = await step.answer_without_running(notes.LENGTH_CUT_NOT_RUN)
            else:
                left = None if self.tool_budget is None else self.tool_budget - self.tool_calls
                reason = notes.budget_not_run(self.tool_budget) if self.tool_budget is not None else ""
                self.tool_calls += len(calls)
                messages = await step.run(budget_left=left, budget_reason=reason)
        except BaseException:
            if self.emit.reached(event):
                await step.recover()
            raise
        self.add_tool_messages(messages)

    async def forced_answer(self, reason: str) -> RunResult:
        """One last model call without tools, told to answer from the evidence so far."""
        detail = notes.stop_detail(reason, turns=self.turns, max_turns=self.max_turns, tool_calls=self.tool_calls,
                                   tool_budget=self.tool_budget, text_tool_calls=self.text_tool_calls)
        log.info("kernel_limit_reached", agent=self.persona.name, session_id=self.context.session_id,
                 reason=reason, turns=self.turns, tool_calls=self.tool_calls)
        note = notes.limit_note(reason, max_turns=self.max_turns, tool_budget=self.tool_budget)
        completion = await self.call_model(self.request(tools=False, extra=note))
        text = completion.message.content or ""
        if completion.message.tool_calls:
            log.info("kernel_forced_answer_ignored_tool_calls", agent=self.persona.name,
                     count=len(completion.message.tool_calls))
        if text.strip() and self.detector(text, None) is None:
            await self.add_assistant(Message(role="assistant", content=text))
        else:
            text = ""
        return await self.finish(reason, text or f"(no answer: {detail})", detail,
                                 completion.finish_reason if text else None)

    async def finish(self, status: str, text: str, detail: str, finish_reason: str | None) -> RunResult:
        await self.emit(FinalEvent(status, text, detail))
        return self.result(status, text, detail, finish_reason)


async def run_agent(
    *,
    model: ModelClient,
    persona: Any,
    system_prompt: str,
    history: Sequence[Message] = (),
    user_message: Message | str | None = None,
    bag: ToolBag,
    runner: ToolRunner | None = None,
    reminder: str | Callable[[], str | None] | None = None,
    limits: Any = None,
    context: ToolCallContext,
    sink: EventSink | None = None,
    pending_user_messages: Callable[[], Sequence[Message | str]] | None = None,
    detect_text_tool_call: TextToolCallDetector | None = None,
) -> RunResult:
    """Run one persona until a final answer or a limit; return a :class:`RunResult`.

    - ``model``: a ``ModelClient`` (``stream(ModelRequest)`` → ``TextDelta``\\ s
      then one ``Completion``).
    - ``persona``: anything with ``name``, ``max_turns`` (model calls per run,
      not counting the provider's retries or the forced last call),
      ``tool_budget`` (tool calls per run, or ``None``) and ``model`` (a model
      name or ``None`` for the provider default).
    - ``system_prompt``: composed by the caller (docs/architecture.md §7); sent first.
    - ``history``: earlier messages of the thread (not copied into the result).
    - ``user_message``: the new user message (text or a ``Message``), or ``None``.
    - ``bag``: the tools the model sees; ``runner``: the ``ToolRunner`` that
      executes them (built from ``bag`` and ``limits`` when ``None``; its read
      cache lasts for this run).
    - ``reminder``: the per-turn ``<system-reminder>`` text, sent as the LAST
      message of every request as a user-role message, never stored (wrapped
      in the tags when it has none); or a zero-argument callable called
      before every request (so the time it carries is the time of that call).
    - ``limits``: an object with ``tool_result_max_chars`` (``LimitsConfig``).
    - ``context``: the ``ToolCallContext`` template for tool calls (session id,
      agent, user, read_only, services); ``call_id`` is set per call.
    - ``sink``: ``async def sink(event)`` receiving the events of
      ``ongridd.kernel.events`` (serialised; its exceptions are logged and the
      run goes on).
    - ``pending_user_messages``: the runtime's inbox, called before every
      model call; what it returns is appended to the history.
    - ``detect_text_tool_call``: override for ``ongridd.llm.textcalls.detect_text_tool_call``.

    Loop: call the model; if the message has tool calls, run them all
    concurrently (one result each, in order) — unless the output was cut
    (``finish_reason == "length"``), then none runs and each is answered that
    the output was cut; if there are none but the text is a tool call
    written as text, answer with a note and go on; otherwise that is the
    final answer.  At ``max_turns`` or ``tool_budget``, one last call without
    tools is told to answer from the evidence so far (status ``max_turns`` /
    ``tool_budget``).  A ``ProviderError`` (or any exception from the model
    client) ends the run with status ``provider_error``; any other
    unexpected exception with status ``error`` (logged).  The run ends with
    one ``FinalEvent`` (ok, max_turns, tool_budget) or ``ErrorEvent``
    (``provider_error``, ``internal``).

    Cancellation: ``trio.Cancelled`` propagates promptly; tool calls in
    flight get ``cancelled`` results and tool messages, emitted under a
    bounded (5 s) shield, so the persisted history stays valid.  No
    ``FinalEvent`` is emitted for a cancelled run.
    """
    if runner is None:
        max_chars = getattr(limits, "tool_result_max_chars", None) or DEFAULT_MAX_RESULT_CHARS
        runner = ToolRunner(bag, max_result_chars=max_chars)
    elif runner.bag is not bag:
        raise ValueError("run_agent: runner.bag must be the bag passed as bag")
    emit = Emitter(sink, session_id=context.session_id, agent=persona.name)
    state = _Run(model=model, persona=persona, system_prompt=system_prompt, history=history, bag=bag,
                 runner=runner, reminder=reminder, context=context, emit=emit,
                 pending_user_messages=pending_user_messages,
                 detector=detect_text_tool_call or _default_detector())
    try:
        return await state.run(user_message)
    except _ModelFailed as exc:
        message = str(exc)
        log.warning("kernel_provider_error", agent=persona.name, session_id=context.session_id, error=message)
        await emit(ErrorEvent("provider_error", message))
        return state.result("provider_error", "", message)
    except Exception as exc:
        log.exception("kernel_internal_error", agent=persona.name, session_id=context.session_id)
        message = f"internal error in the agent loop: {type(exc).__name__}: {exc}"
        await emit(ErrorEvent("internal", message))
        return state.result("error", "", message)
