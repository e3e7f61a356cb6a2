"""Running personas on the kernel: the coordinator turn, workers, the
reviewer and the interjection call.  Builds tool bags (§8) — every
``write``/``destructive`` tool in any bag is wrapped by the review gate
here, in one place, so no persona field or delegation path can skip it.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import trio

from ongridd.kernel.events import EventSink, ToolEndEvent
from ongridd.kernel.loop import RunResult, run_agent
from ongridd.config import Config
from ongridd.llm.types import Completion, Message, ModelClient, ModelRequest
from ongridd.logs import bound_context
from ongridd.personas.parse import Persona
from ongridd.personas.skills import Skill
from ongridd.personas.prompt import (
    CATALOG_INTRO,
    agent_catalog,
    compose_system_prompt,
    config_backends,
    config_inventory,
    host_time_zone,
    reminder_renderer,
)
from ongridd.runtime.compaction import ThreadHistories
from ongridd.runtime.gate import ReviewGate
from ongridd.runtime.ports import Row, RuntimeStore, RuntimeWriter
from ongridd.runtime.registries import Registries
from ongridd.runtime.sink import PersistSink
from ongridd.secretset import redact_wrapped
from ongridd.runtime.workers import WorkerManager, WorkerOutcome, WorkerTask
from ongridd.tools.bag import ToolBag, coordinator_bag, worker_bag, wrap_tools
from ongridd.tools.runner import SecretTaint, ToolRunner
from ongridd.tools.spec import ToolCallContext

if TYPE_CHECKING:  # core imports this module
    from ongridd.runtime.core import Turn

REVIEWER = "reviewer"
#: workers' system prompts kept composed (one per persona; the least recently made dropped first)
WORKER_PROMPTS_KEPT = 256
COORDINATOR = "default"


class AgentRunner:
    """``model()``: returns the ModelClient.  ``workers``: the WorkerManager.
    ``writer``: the StoreWriter every run's messages and audit rows go through.
    ``clock``: returns the current time as an aware datetime (the per-call
    reminder's time line; tests inject a fixed one)."""

    def __init__(self, *, config: Config, store: RuntimeStore, writer: RuntimeWriter, workers: WorkerManager,
                 model: Callable[[], ModelClient],
                 clock: Callable[[], datetime] | None = None):
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.config = config
        self.store = store
        self.writer = writer
        self.workers = workers
        self.model = model
        #: coordinator threads' in-memory histories and their budget (ongridd/runtime/compaction.py)
        self.histories = ThreadHistories(store=store, writer=writer, model=model, config=config)
        #: workers' system prompts by persona name: (the persona and skills snapshot they were made from,
        #: the base prompt, the prompt); at most WORKER_PROMPTS_KEPT, the oldest dropped first
        self._worker_prompts: collections.OrderedDict[str, tuple[Persona, object, str, str]] = \
            collections.OrderedDict()

    # ---- helpers ------------------------------------------------------------
    def _skills(self, snap: Registries, persona: Persona) -> list[Skill]:
        out: list[Skill] = []
        for name in getattr(persona, "skills", ()) or ():
            skill = snap.skills.by_name(name) if snap.skills is not None else None
            if skill is not None:
                out.append(skill)
        return out

    def _gate(self, snap: Registries, agents: Mapping[str, Persona], coordinator_id: str,
              turn_seq: Callable[[], Awaitable[int | None]], taint: SecretTaint | None) -> ReviewGate:
        """The review gate of one run; its reviewers are rows of the turn ``turn_seq()`` names and share
        its ``taint``."""

        async def spawn_reviewer(ctx: ToolCallContext, brief: str, description: str, timeout_s: float) -> WorkerOutcome:
            return await self.spawn_worker(snap=snap, agents=agents, persona=REVIEWER, description=description,
                                           brief=brief, parent_id=ctx.session_id, coordinator_id=coordinator_id,
                                           user_id=ctx.user_id, timeout_s=timeout_s, turn_seq=await turn_seq(),
                                           taint=taint)

        return ReviewGate(store=self.store, spawn_reviewer=spawn_reviewer,
                          reviewer_timeout_s=self.config.limits.reviewer_timeout_s,
                          on_decision=self.workers.note_decision, on_not_made=self.workers.note_not_made)

    async def _run(self, *, persona: Persona, system_prompt: str, history: Sequence[Message],
                   user_message: Message | None, bag: ToolBag, reminder: str | Callable[[], str | None] | None, ctx: ToolCallContext,
                   sink: EventSink, taint: SecretTaint | None,
                   inbox: Callable[[], list[Message]] | None = None) -> RunResult:
        runner = ToolRunner(bag, max_result_chars=self.config.limits.tool_result_max_chars, taint=taint)
        # every line logged during this turn or worker (tools, kernel, plugins) carries these
        with bound_context(session_id=ctx.session_id, agent=ctx.agent, user=ctx.user_id):
            return await run_agent(model=self.model(), persona=persona, system_prompt=system_prompt,
                                   history=history, user_message=user_message, bag=bag, reminder=reminder,
                                   limits=self.config.limits, context=ctx, sink=sink,
                                   pending_user_messages=inbox, runner=runner)

    def _worker_prompt(self, snap: Registries, profile: Persona) -> str:
        """A worker's system prompt, composed once per persona file, skills
        snapshot and base prompt (a reload or a live edit makes a new one)."""
        base = self.config.prompt.base
        skills_now = snap.skills.snapshot() if snap.skills is not None else None
        cached = self._worker_prompts.get(profile.name)
        if cached is not None and cached[0] is profile and cached[1] is skills_now and cached[2] == base:
            return cached[3]
        # a secret a persona or skill file holds split by a line wrap, which the model wrapper's
        # literal redaction would not see, is hidden here, once per composed prompt
        system = redact_wrapped(compose_system_prompt(base=base, persona=profile, skills=self._skills(snap, profile)))
        self._worker_prompts[profile.name] = (profile, skills_now, base, system)
        self._worker_prompts.move_to_end(profile.name)
        while len(self._worker_prompts) > WORKER_PROMPTS_KEPT:
            self._worker_prompts.popitem(last=False)
        return system

    def _worker_reminder(self, profile: Persona) -> Callable[[], str | None]:
        """A worker's per-call reminder: the time line and its critical reminder."""
        return _per_second(self.clock, reminder_renderer(persona=profile, tz_name=host_time_zone()))

    # ---- the coordinator ----------------------------------------------------
    def _coordinator_prompt(self, snap: Registries, agents: Mapping[str, Persona], persona: Persona) -> tuple[str, list[str]]:
        """The coordinator's system prompt and the valid ``subagent_type`` names.

        Composed once per registry snapshot: the result is kept for the
        identity of ``(snap, agents)`` (a reload, an install or a live edit
        makes new ones), the skills snapshot and the base prompt, so a turn on an unchanged
        registry reuses it instead of rebuilding the catalog.
        """
        base = self.config.prompt.base
        skills_now = snap.skills.snapshot() if snap.skills is not None else None
        key = (snap, agents, skills_now)
        cached = getattr(self, "_coordinator_cache", None)
        if cached is not None and all(a is b for a, b in zip(cached[0], key)) and cached[1] == base:
            return cached[2], cached[3]
        spawnable = snap.agents.spawnable(agents)
        catalog = agent_catalog(spawnable, snapshot_key=agents)
        system = redact_wrapped(compose_system_prompt(base=base, persona=persona,
                                                      catalog=f"{CATALOG_INTRO}\n{catalog}" if catalog else "",
                                                      skills=self._skills(snap, persona)))
        names = [p.name for p in spawnable]
        self._coordinator_cache = (key, base, system, names)
        return system, names

    async def run_coordinator(self, *, snap: Registries, agents: Mapping[str, Persona], turn: Turn, text: str,
                              publish: Callable[[Row], None]) -> RunResult:
        """One coordinator turn on the session's stored history."""
        persona = agents.get(COORDINATOR)
        if persona is None:
            raise RuntimeError("no 'default' persona is loaded; the coordinator cannot run")
        await self.writer.flush(turn.session_id)  # the last turn's writes are part of the history
        system, names = self._coordinator_prompt(snap, agents, persona)
        turn.system_prompt = system
        render_reminder = reminder_renderer(persona=persona, tz_name=host_time_zone(), subagent_types=names,
                                            inventory=config_inventory(self.config),
                                            backends=config_backends(self.config), locale=turn.locale)
        reminder = _per_second(self.clock, render_reminder)
        bag = coordinator_bag(persona, snap.tools, turn.control_tools, snap.stubs, personas=agents)
        bag = wrap_tools(bag, self._gate(snap, agents, turn.session_id, turn.turn_seq, turn.secret_taint).wrap)
        ctx = ToolCallContext(session_id=turn.session_id, agent=COORDINATOR, user_id=turn.user_id,
                              read_only=persona.read_only)
        sink = PersistSink(self.writer, turn.session_id, publish=publish, known_tools=_known(bag),
                           on_user_message=turn.keep_user_write, settles=turn.settles,
                           mutating_tools=_mutating(bag))
        # the system prompt (with the catalog), the tool schemas and the reminder are outside the
        # history's share of the budget but inside what the model receives (counted when the context is known)
        fixed = 0
        if getattr(self.config.llm, "context_tokens", None):
            schemas = json.dumps(bag.schemas(), ensure_ascii=False, default=str)
            fixed = len(system) + len(schemas) + len(reminder() or "")
        history = await self.histories.history_for_turn(session_id=turn.session_id, user_id=turn.user_id,
                                                        new_user_text=text, fixed_chars=fixed)

        return await self._run(persona=persona, system_prompt=system, history=history,
                               user_message=Message(role="user", content=text), bag=bag, reminder=reminder,
                               ctx=ctx, sink=sink, taint=turn.secret_taint, inbox=turn.take_inbox)

    # ---- workers and the reviewer ----------------------------------------------
    async def spawn_worker(self, *, snap: Registries, agents: Mapping[str, Persona], persona: str, description: str, brief: str,
                           parent_id: str, coordinator_id: str, user_id: str,
                           timeout_s: float | None = None, turn_seq: int | None = None,
                           on_created: Callable[[str], None] | None = None,
                           taint: SecretTaint | None = None) -> WorkerOutcome:
        """Run ``persona`` as a child session of ``parent_id`` (see WorkerManager.spawn);
        ``turn_seq``: the seq of the user message whose turn this is (stored on the row);
        ``on_created``: told the worker's id as soon as it is known; ``taint``: its turn's
        (:class:`~ongridd.tools.runner.SecretTaint`; None: its own)."""

        async def this_turn() -> int | None:
            return turn_seq

        profile = agents.get(persona)
        if profile is None:
            raise RuntimeError(f"persona {persona!r} is not loaded")
        limit = timeout_s if timeout_s is not None else self.config.limits.worker_timeout_s

        async def run(task: WorkerTask) -> tuple[str, str, str | None]:
            bag = worker_bag(profile, snap.tools)
            if persona == REVIEWER:  # the gate's own worker never holds a mutating tool
                bag = ToolBag(agent=bag.agent, tools={n: t for n, t in bag.tools.items() if not t.may_mutate},
                              stubs={})
            else:
                bag = wrap_tools(bag, self._gate(snap, agents, coordinator_id, this_turn, taint).wrap)
            system = self._worker_prompt(snap, profile)
            ctx = ToolCallContext(session_id=task.task_id, agent=persona, user_id=user_id,
                                  read_only=profile.read_only)

            def keep_partial(text: str) -> None:
                task.partial = text

            sink = PersistSink(self.writer, task.task_id, owner=coordinator_id, on_text=keep_partial,
                               known_tools=_known(bag), mutating_tools=_mutating(bag))
            result = await self._run(persona=profile, system_prompt=system, history=(),
                                     user_message=Message(role="user", content=brief), bag=bag,
                                     reminder=self._worker_reminder(profile), ctx=ctx, sink=sink, taint=taint)
            task.finish_reason = result.finish_reason
            task.stopped_by = result.status if result.status in ("max_turns", "tool_budget") else None
            if persona == REVIEWER and result.status == "ok" and result.detail:
                # a cut or empty review decides nothing: the gate fails closed
                return "failed", result.text, f"the reviewer's answer is unusable: {result.detail}"
            if result.status in ("ok", "max_turns", "tool_budget"):
                note = None if result.status == "ok" else f"{result.status}: {result.detail}"
                return "completed", result.text, note
            return "failed", result.text or task.partial, f"{result.status}: {result.detail}"

        return await self.workers.spawn(persona=persona, description=description, brief=brief,
                                        parent_id=parent_id, coordinator_id=coordinator_id, user_id=user_id,
                                        timeout_s=limit, run=run, turn_seq=turn_seq, on_created=on_created)

    # ---- interjection -----------------------------------------------------------
    async def run_interjection(self, *, turn: Turn, text: str, running: Sequence[WorkerTask],
                               publish: Callable[[Row], None]) -> None:
        """Exactly one model call with only SendMessage and TaskStop.

        Its tool calls are audited on the coordinator session; its messages
        are not added to the thread (the turn's own history gets the user's
        message at its next model call).
        """
        tools = {t.name: t for t in turn.control_tools if t.name in ("SendMessage", "TaskStop")}
        if not tools:
            return
        workers = "\n".join(f"- task_id {w.task_id} ({w.persona}, {w.status}): {w.description}" for w in running)
        prompt = ("The user sent a new message while your turn is still running:\n\n" + text + "\n\n"
                  "Workers running now:\n" + (workers or "- none") + "\n\n"
                  "Right now you may only call SendMessage (to acknowledge or answer briefly) and TaskStop "
                  "(for any worker this message makes useless). The message will also be added to your "
                  "conversation before your next step, so do not answer it in full here.")

        bag = ToolBag(agent=COORDINATOR, tools=tools)
        request = ModelRequest(messages=[Message(role="system", content=turn.system_prompt),
                                         Message(role="user", content=prompt)],
                               tools=bag.schemas(), agent=COORDINATOR, session_id=turn.session_id)
        sink = PersistSink(self.writer, turn.session_id, publish=publish, persist_messages=False,
                           known_tools=_known(bag))
        completion = None
        with trio.move_on_after(self.config.llm.timeout_s):
            async for event in self.model().stream(request):
                if isinstance(event, Completion):
                    completion = event
        sink.add_usage(completion.usage if completion is not None else None)  # the call counts on the thread
        if completion is None:
            return
        if completion.message.content and completion.message.content.strip():
            # a model that answers the interjection in plain text instead of
            # SendMessage: the user still sees the acknowledgement
            from ongridd.runtime import frames

            publish(frames.interim(completion.message.content.strip()))
        if completion.finish_reason == "length":
            return
        runner = ToolRunner(bag, max_result_chars=self.config.limits.tool_result_max_chars, taint=turn.secret_taint)
        for call in completion.message.tool_calls:
            ctx = ToolCallContext(session_id=turn.session_id, agent=COORDINATOR, user_id=turn.user_id,
                                  call_id=call.id)
            result = await runner.run(call, ctx)
            await sink(ToolEndEvent(call_id=call.id, name=call.name, arguments=call.arguments, result=result))


def _per_second(clock: Callable[[], datetime], render: Callable[[datetime | None], str | None]) -> Callable[[], str | None]:
    """``render(clock())``, rendered again only when the clock has moved to
    another second (the reminder's time line shows seconds; the rest of it is
    fixed for the run): a run's model calls mostly reuse the text."""
    shown: datetime | None = None
    text: str | None = None

    def reminder() -> str | None:
        nonlocal shown, text
        now = clock()
        second = now.replace(microsecond=0)
        if shown is None or shown != second:
            shown, text = second, render(now)
        return text

    return reminder


def _known(bag: ToolBag) -> frozenset[str]:
    return frozenset(bag.tools) | frozenset(bag.stubs)


def _mutating(bag: ToolBag) -> frozenset[str]:
    return frozenset(name for name, tool in bag.tools.items() if tool.may_mutate)
