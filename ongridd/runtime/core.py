"""The runtime: coordinator threads and turns (DESIGN.md §4, §9, §11).

The server talks to it through :meth:`Runtime.open_thread`,
:meth:`Runtime.subscribe`, :meth:`Runtime.submit`, :meth:`Runtime.stop`,
:meth:`Runtime.session_tree` and :meth:`Runtime.session_audit`.  Turns run
in the runtime's own service nursery, never in a client's task.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import trio

from ongridd.errors import NotFound, OngridError, ProviderError, TaskStateError
from ongridd.llm.types import Message
from ongridd.logs import get_logger
from ongridd.metrics import TURNS
from ongridd.runtime import frames
from ongridd.runtime.agentrun import AgentRunner
from ongridd.runtime.control import ControlDeps, DedupTable, build_control_tools
from ongridd.runtime.hub import SessionHub
from ongridd.runtime.registries import RegistryHolder
from ongridd.runtime.workers import WorkerManager

log = get_logger(__name__)

INTERJECTION_DEBOUNCE_S = 0.3


@attrs.define(eq=False)
class Turn:
    """A running coordinator turn."""

    session_id: str
    user_id: str
    locale: str | None
    cancel_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    inbox: list[Message] = attrs.field(factory=list)
    stopped_by_user: bool = False
    done: trio.Event = attrs.field(factory=trio.Event)
    control_tools: list[Any] = attrs.field(factory=list)
    system_prompt: str = ""
    interjections: set[trio.CancelScope] = attrs.field(factory=set)
    pending_interjection: list[str] = attrs.field(factory=list)
    interjecting: bool = False


class Runtime:
    """``config``: Config; ``store``: Store; ``holder``: RegistryHolder;
    ``model``: a ModelClient (or a zero-argument factory returning one,
    called lazily on the first turn)."""

    def __init__(self, config: Any, store: Any, holder: RegistryHolder, model: Any):
        self.config = config
        self.store = store
        self.holder = holder
        self._model = model
        self.hubs: dict[str, SessionHub] = {}
        self.turns: dict[str, Turn] = {}
        self.dedup: dict[str, DedupTable] = {}
        self.workers = WorkerManager(store, self._publish)
        self.runner = AgentRunner(config=config, store=store, workers=self.workers, model=self._get_model)
        self.nursery: trio.Nursery | None = None
        self.accepting = True

    # ---- lifecycle ----------------------------------------------------------
    def _get_model(self) -> Any:
        if callable(self._model) and not hasattr(self._model, "stream"):
            self._model = self._model()
        return self._model

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The service nursery; runs until cancelled.  On exit every open
        worker row is closed ``killed`` ("daemon shutdown")."""
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                nursery.start_soon(self._housekeeping)
                await trio.sleep_forever()
        finally:
            self.workers.shutting_down = True
            with trio.move_on_after(5, shield=True):
                try:
                    n = await self.store.close_open_workers("killed", "daemon shutdown")
                    if n:
                        log.info("workers_closed_at_shutdown", count=n)
                except Exception:
                    log.exception("close_open_workers_failed")
                model = self._model
                if hasattr(model, "aclose"):
                    with contextlib.suppress(Exception):
                        await model.aclose()

    async def _housekeeping(self) -> None:
        while True:
            await trio.sleep(600)
            self.forget_idle()

    def forget_idle(self) -> None:
        """Drop in-memory state nobody needs any more: finished worker tasks
        older than an hour, dedup tables whose window has passed, and the
        hubs of threads with no turn, no client and nothing to deliver (a
        long-running daemon must not grow with every thread it ever saw)."""
        self.workers.forget_finished()
        for sid, table in list(self.dedup.items()):
            if sid not in self.turns and table.idle():
                del self.dedup[sid]
        for sid, hub in list(self.hubs.items()):
            if sid not in self.turns and hub.idle:
                del self.hubs[sid]

    async def drain(self, grace_s: float) -> None:
        """Stop accepting turns and wait up to ``grace_s`` for running ones;
        then stop the rest (their workers end ``killed``, "daemon shutdown")."""
        self.accepting = False
        with trio.move_on_after(grace_s):
            while self.turns:
                await next(iter(self.turns.values())).done.wait()
        self.workers.shutting_down = True
        for turn in list(self.turns.values()):
            _cancel_turn(turn)
        with trio.move_on_after(3):
            while self.turns:
                await next(iter(self.turns.values())).done.wait()

    def refresh_metrics(self) -> None:
        """Hook for /metrics (gauges are kept current by the workers)."""

    # ---- sessions ---------------------------------------------------------
    def _hub(self, session_id: str) -> SessionHub:
        hub = self.hubs.get(session_id)
        if hub is None:
            hub = self.hubs[session_id] = SessionHub()
        return hub

    def _publish(self, session_id: str, frame: dict) -> None:
        self._hub(session_id).publish(frame)

    async def open_thread(self, *, user_id: str, thread: str) -> tuple[str, bool]:
        """The coordinator session of (user, thread): ``(session_id, resumed)``."""
        row, created = await self.store.get_or_create_coordinator(user_id, thread)
        return row["id"], not created

    @contextlib.contextmanager
    def subscribe(self, session_id: str) -> Iterator[tuple[list[dict], trio.MemoryReceiveChannel]]:
        """``(initial frames, channel)`` of a coordinator session's frames."""
        with self._hub(session_id).subscribe() as pair:
            yield pair

    async def _owned(self, session_id: str, user_id: str) -> dict:
        row = await self.store.get_session(session_id)
        if row is None or row.get("user_id") != user_id:
            raise NotFound(f"no session {session_id}")
        return row

    async def session_tree(self, session_id: str, *, user_id: str) -> dict:
        """The nested tree from ``session_id`` (``{id, agent_id, status,
        description, closed_at, close_reason, …, children: [...]}``).
        Raises NotFound when it does not exist or belongs to another user."""
        await self._owned(session_id, user_id)
        return await self.store.session_tree(session_id)

    async def session_audit(self, session_id: str, *, user_id: str) -> list[dict]:
        """Audit rows of the session and its children, oldest first
        (``{id, session_id, agent_id, tool_name, arguments, result, status,
        duration_ms, created_at}``).  Raises NotFound as :meth:`session_tree`."""
        await self._owned(session_id, user_id)
        return await self.store.list_audit(session_id, include_children=True)

    # ---- turns -----------------------------------------------------------------
    async def submit(self, session_id: str, *, user_id: str, text: str, locale: str | None = None) -> None:
        """Start a turn with ``text``, or — while one runs — interject it.

        Returns once the turn (or interjection) is started; raises NotFound
        for a session of another user and OngridError while shutting down.
        """
        row = await self._owned(session_id, user_id)
        if row.get("parent_session_id") is not None:
            raise NotFound(f"{session_id} is not a chat thread")
        if not self.accepting or self.nursery is None:
            raise OngridError("the daemon is shutting down; try again shortly")
        running = self.turns.get(session_id)
        if running is not None:
            running.inbox.append(Message(role="user", content=text))
            running.pending_interjection.append(text)
            if not running.interjecting:  # one interjection call at a time; later messages are batched
                running.interjecting = True
                self.nursery.start_soon(self._interject, running)
            return
        turn = Turn(session_id=session_id, user_id=user_id, locale=locale)
        self.turns[session_id] = turn
        self._hub(session_id).turn_running = True
        self.nursery.start_soon(self._run_turn, turn, text)

    async def stop(self, session_id: str, *, user_id: str, task_id: str | None = None) -> None:
        """Stop one worker (``task_id``) or the whole running turn.

        Raises NotFound / TaskStateError (nothing is changed then).
        """
        await self._owned(session_id, user_id)
        if task_id:
            await self.workers.stop(task_id, coordinator_id=session_id)
            return
        turn = self.turns.get(session_id)
        if turn is None:
            raise TaskStateError("no turn is running in this thread")
        turn.stopped_by_user = True
        _cancel_turn(turn)
        with trio.move_on_after(5):
            await turn.done.wait()

    def _control_deps(self, turn: Turn, spawnable: list[str], spawn: Callable) -> ControlDeps:
        async def stop(task_id: str) -> Any:
            return await self.workers.stop(task_id, coordinator_id=turn.session_id)

        return ControlDeps(
            spawnable=spawnable,
            spawn=spawn,
            stop=stop,
            interim=lambda text: self._publish(turn.session_id, frames.interim(text)),
            dedup=self.dedup.setdefault(turn.session_id, DedupTable()),
            result_max_chars=self.config.limits.tool_result_max_chars,
        )

    async def _run_turn(self, turn: Turn, text: str) -> None:
        hub = self._hub(turn.session_id)
        end = frames.error("internal", "the turn ended without an answer")
        status = "error"
        try:
            with turn.cancel_scope:
                snap = self.holder.current
                agents = snap.agents.snapshot()

                async def spawn(ctx: Any, persona: str, description: str, prompt: str) -> Any:
                    return await self.runner.spawn_worker(
                        snap=snap, agents=agents, persona=persona, description=description, brief=prompt,
                        parent_id=turn.session_id, coordinator_id=turn.session_id, user_id=turn.user_id)

                spawnable = [p.name for p in snap.agents.spawnable(agents)]
                turn.control_tools = build_control_tools(self._control_deps(turn, spawnable, spawn))
                result = await self.runner.run_coordinator(
                    snap=snap, agents=agents, turn=turn, text=text,
                    publish=lambda f: self._publish(turn.session_id, f))
                status = result.status
                if result.status == "provider_error":
                    end = frames.error("provider_error", result.detail or result.text or "the model provider failed")
                elif result.status == "error":
                    end = frames.error("internal", result.detail or "the turn failed with an internal error")
                elif not result.text.strip():  # never an empty chat bubble
                    end = frames.final(f"(no answer: {result.detail or 'the model returned an empty answer'})")
                else:
                    end = frames.final(result.text)
            if turn.cancel_scope.cancelled_caught:
                status = "stopped"
                end = frames.error("stopped", "the turn was stopped" if turn.stopped_by_user
                                   else "the turn was stopped by a daemon shutdown")
        except ProviderError as exc:
            status, end = "provider_error", frames.error("provider_error", str(exc))
        except Exception as exc:
            log.exception("turn_failed", session_id=turn.session_id)
            status, end = "error", frames.error("internal", f"internal error: {exc!r}")
        finally:
            if turn.inbox and (turn.cancel_scope.cancel_called or not self.accepting):
                await self._keep_unseen(turn)
            # From here on no await: a message submitted now starts a new turn.
            leftover = [m.content for m in turn.inbox if m.content]
            turn.inbox.clear()
            self.turns.pop(turn.session_id, None)
            TURNS.labels(status).inc()
            hub.end_turn(end)
            turn.done.set()
            if leftover:
                self._follow_up(turn, "\n\n".join(leftover))

    async def _keep_unseen(self, turn: Turn) -> None:
        """A stopped turn never showed the model the messages still in its
        inbox: store them in the thread so the next turn sees them."""
        with trio.move_on_after(5, shield=True):
            while turn.inbox:
                msg = turn.inbox.pop(0)
                try:
                    await self.store.append_message(turn.session_id, role="user", content=msg.content)
                except Exception:
                    log.exception("inbox_persist_failed", session_id=turn.session_id)

    def _follow_up(self, turn: Turn, text: str) -> None:
        """Messages that arrived during the turn's last model call (too late
        for it) get a turn of their own, so no user message goes unanswered."""
        if not self.accepting or self.nursery is None or turn.session_id in self.turns:
            log.warning("follow_up_dropped", session_id=turn.session_id)
            return
        follow = Turn(session_id=turn.session_id, user_id=turn.user_id, locale=turn.locale)
        self.turns[turn.session_id] = follow
        self._hub(turn.session_id).turn_running = True
        self.nursery.start_soon(self._run_turn, follow, text)

    async def _interject(self, turn: Turn) -> None:
        """Interjection calls, one at a time: each is one model call in which
        the coordinator may only SendMessage and TaskStop, told of the new
        message(s) and its running workers.  Messages that arrive meanwhile
        are batched into the next call (a flood costs a few calls, not one
        each).  Stopping the turn (or the daemon) stops them too."""
        try:
            while turn.pending_interjection and not turn.cancel_scope.cancel_called:
                await trio.sleep(INTERJECTION_DEBOUNCE_S)  # gather a burst of messages into one call
                texts, turn.pending_interjection[:] = list(turn.pending_interjection), []
                with trio.CancelScope() as scope:
                    turn.interjections.add(scope)
                    try:
                        await self.runner.run_interjection(
                            turn=turn, text="\n\n".join(texts), running=self.workers.running(turn.session_id),
                            publish=lambda f: self._publish(turn.session_id, f))
                    except Exception:
                        log.exception("interjection_failed", session_id=turn.session_id)
                    finally:
                        turn.interjections.discard(scope)
        finally:
            turn.interjecting = False


def _cancel_turn(turn: Turn) -> None:
    """Cancel a turn and its interjection calls (its workers run inside it)."""
    turn.cancel_scope.cancel()
    for scope in list(turn.interjections):
        scope.cancel()
