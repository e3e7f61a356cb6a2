"""Worker (and reviewer) lifecycle (docs/architecture.md §4, §11).

``pending → running → completed | failed | killed``.  The session row is
created ``pending`` before the worker starts and closed on every terminal
path from a ``finally:``, queued on the store writer so it cannot be
dropped.  A stop (TaskStop, a user's stop frame, the turn being stopped,
daemon shutdown) ends a worker ``killed``; its time limit, an exception or
a provider error end it ``failed`` with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from ongridd.errors import NotFound, TaskStateError
from ongridd.logs import get_logger
from ongridd.metrics import WORKERS, WORKERS_RUNNING, labelled
from ongridd.runtime.ports import RuntimeStore, RuntimeWriter
from ongridd.timeparse import iso_utc

log = get_logger(__name__)

TERMINAL = ("completed", "failed", "killed")
CLOSE_SHIELD_S = 5.0


@attrs.define(eq=False)
class WorkerTask:
    """In-memory state of one worker or reviewer run.

    ``task_id`` is its ``chat_sessions.id``; ``coordinator_id`` the root
    coordinator session (tiles go there); ``parent_id`` the calling session.
    ``finish_reason`` and ``stopped_by`` are set by the run function (see
    :class:`WorkerOutcome`).
    """

    task_id: str
    persona: str
    description: str
    coordinator_id: str
    parent_id: str
    user_id: str
    status: str = "pending"
    #: when it was created (ISO 8601 UTC, milliseconds): shown in its tiles
    started_at: str = attrs.field(factory=lambda: iso_utc(time.time()))
    close_reason: str | None = None
    result: str = ""
    partial: str = ""
    finish_reason: str | None = None
    stopped_by: str | None = None
    #: a reviewer's decision as the review gate read it (``approve``/``reject``), once decided
    decision: str | None = None
    #: its changes the review gate did not let run (rejected, or refused for a read-only persona)
    changes_not_made: int = 0
    stop_requested: bool = False
    #: why it was stopped, when asked to (its close reason): who asked
    stop_reason: str = "stopped"
    cancel_scope: trio.CancelScope | None = None
    done: trio.Event = attrs.field(factory=trio.Event)
    started_monotonic: float = attrs.field(factory=time.monotonic)


@attrs.frozen
class WorkerOutcome:
    """How a worker ended: ``status`` completed|failed|killed, ``result`` its
    final answer (or partial output), ``reason`` the close reason (None when
    completed normally).  ``finish_reason``: what the provider said about the
    model call that produced ``result`` (``stop``, ``length``,
    ``content_filter``; ``None`` when unknown or no answer was produced).
    ``stopped_by``: ``max_turns``/``tool_budget`` when the worker answered
    from a limit, else ``None``.  ``timed_out``: the worker's time limit
    ended it (status ``failed``)."""

    task_id: str
    persona: str
    status: str
    result: str
    reason: str | None = None
    finish_reason: str | None = None
    stopped_by: str | None = None
    timed_out: bool = False


# run(task) -> (status, text, reason): the persona run itself, supplied by the runtime; it
# may set task.finish_reason / task.stopped_by, which a completed outcome carries
RunFn = Callable[[WorkerTask], Awaitable[tuple[str, str, str | None]]]
PublishFn = Callable[[str, dict[str, Any]], None]


class WorkerManager:
    """Spawns, tracks and stops workers.  ``store`` is the Store (reads);
    ``writer`` the StoreWriter the rows are written through;
    ``publish(coordinator_id, frame)`` sends frames to a coordinator's
    subscribers; ``shutdown_reason`` is set by the daemon when it stops."""

    def __init__(self, store: RuntimeStore, publish: PublishFn, writer: RuntimeWriter):
        self.store = store
        self.writer = writer
        self.publish = publish
        self.tasks: dict[str, WorkerTask] = {}
        self.shutting_down = False

    def running(self, coordinator_id: str) -> list[WorkerTask]:
        """Workers (and reviewers) of this coordinator session not ended yet."""
        return [t for t in self.tasks.values() if t.coordinator_id == coordinator_id and t.status not in TERMINAL]

    def _tile(self, task: WorkerTask) -> None:
        from ongridd.runtime import frames

        parent = task.parent_id if task.parent_id != task.coordinator_id else None
        self.publish(task.coordinator_id, frames.agent_tile(task.task_id, task.persona, task.description,
                                                            task.status, task.started_at, task.decision, parent,
                                                            task.changes_not_made))

    def note_decision(self, task_id: str, decision: str) -> None:
        """The review gate decided on what reviewer ``task_id`` answered: its
        tile says so (``decision`` on its ``agent_tile``)."""
        task = self.tasks.get(task_id)
        if task is not None:
            task.decision = decision
            self._tile(task)

    def note_not_made(self, task_id: str) -> None:
        """A change of worker ``task_id`` was not made (the review gate rejected or refused it):
        its tile counts it (``changes_not_made``), so a completed worker does not read as one
        that changed what it set out to."""
        task = self.tasks.get(task_id)
        if task is not None:
            task.changes_not_made += 1
            self._tile(task)

    async def spawn(self, *, persona: str, description: str, brief: str, parent_id: str, coordinator_id: str,
                    user_id: str, timeout_s: float, run: RunFn, turn_seq: int | None = None,
                    on_created: Callable[[str], None] | None = None) -> WorkerOutcome:
        """Create the row (pending, and running in the same transaction; ``turn_seq``: the seq of the user message
        whose turn this is; ``on_created`` is told its id as soon as it is known), run ``run(task)`` under the time limit,
        close the row on every path.  Returns the outcome; raises only
        ``trio.Cancelled`` (after closing the row ``killed``) and StoreError
        (NotFound for an unknown parent) when the row cannot even be created.

        Cancellation: the worker's run is cancelled; its row is closed
        ``killed`` (reason ``daemon shutdown`` or ``stopped``): the close is
        queued on the writer, which writes it whatever happens to this task;
        a bounded shield only limits how long this task waits for it.  Then
        Cancelled propagates.
        """
        created = self.writer.create_session(owner=coordinator_id, agent_id=persona, user_id=user_id,
                                             parent_session_id=parent_id, description=description,
                                             turn_seq=turn_seq)
        if on_created is not None:
            on_created(created.session_id)
        # queued together, so one transaction holds both: the row exists and says running before
        # the running tile is sent (a cancelled wait still writes them, the close right behind)
        running = self.writer.mark_running(created.session_id, owner=coordinator_id)
        try:
            row = await created.wait()
        except BaseException as exc:
            if _is_cancellation(exc):  # the insert still happens: queue the close right behind it
                self.writer.close_session(created.session_id, "killed", self._stop_reason(parent_id, coordinator_id),
                                          owner=coordinator_id)
            raise
        task = WorkerTask(task_id=row["id"], persona=persona, description=description,
                          coordinator_id=coordinator_id, parent_id=parent_id, user_id=user_id)
        self.tasks[task.task_id] = task
        self._tile(task)
        status, text = "failed", ""
        reason: str | None = "internal error"
        timed_out = False
        try:
            with trio.CancelScope() as scope:
                task.cancel_scope = scope
                if task.stop_requested:
                    scope.cancel()
                await running.wait()  # committed with the row: no wait in practice
                task.status = "running"
                WORKERS_RUNNING.inc()
                self._tile(task)
                with trio.move_on_after(timeout_s) as timer:
                    status, text, reason = await run(task)
                if timer.cancelled_caught:
                    status, reason = "failed", f"timeout: the worker ran past its limit of {timeout_s:g} s"
                    text, timed_out = task.partial, True
            if scope.cancelled_caught and task.stop_requested:
                status, reason, text = "killed", task.stop_reason, task.partial
        except BaseException as exc:
            # Cancellation may arrive wrapped in an exception group (a nursery
            # in the run below us): match it by content, not by type.
            if _is_cancellation(exc):
                status, text = "killed", task.partial
                reason = self._stop_reason(parent_id, coordinator_id)
                raise
            status, reason, text = "failed", f"internal error: {exc!r}", task.partial
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: record, then let it go
                raise
            # a bug below us must not leave the row open nor abort the coordinator
            log.exception("worker_crashed", task_id=task.task_id, persona=persona)
        finally:
            if task.status == "running":
                WORKERS_RUNNING.dec()
            task.status, task.close_reason, task.result = status, reason, text
            closing = self.writer.close_session(task.task_id, status, reason, owner=coordinator_id)
            # A completed worker's close joins the coordinator's next commit: the writer commits in
            # submission order, so no later row of the turn is stored without it, the turn's final
            # waits for it, and API reads flush first.  A failed or stopped one is waited for (bounded:
            # the wait only, not the write), so its row is closed before the stop is answered.
            if status != "completed":
                with trio.move_on_after(CLOSE_SHIELD_S, shield=True):
                    await closing.settled()
            labelled(WORKERS, persona, status).inc()
            self._tile(task)
            from ongridd.runtime import frames

            self.publish(task.coordinator_id, frames.agent_result(task.task_id, status, text or reason or ""))
            task.done.set()
            log.info("worker_closed", task_id=task.task_id, persona=persona, status=status, reason=reason)
        completed = status == "completed"
        return WorkerOutcome(task.task_id, persona, status, text, reason,
                             finish_reason=task.finish_reason if completed else None,
                             stopped_by=task.stopped_by if completed else None, timed_out=timed_out)

    def _stop_reason(self, parent_id: str, coordinator_id: str) -> str:
        if self.shutting_down:
            return "daemon shutdown"
        return ("stopped: the turn was stopped" if parent_id == coordinator_id
                else "stopped: its calling session was stopped")

    async def stop(self, task_id: str, *, coordinator_id: str, wait_s: float = 5.0,
                   reason: str = "stopped") -> WorkerTask:
        """Stop a worker of this coordinator session; it ends ``killed`` with ``reason`` (who
        stopped it, e.g. ``stopped by the user``) as its close reason.

        Raises NotFound (no such task in this session) or TaskStateError
        (``W1 is not running (completed)``); neither changes anything.
        Waits up to ``wait_s`` for the row to be closed.
        """
        task = self.tasks.get(task_id)
        if task is None or task.coordinator_id != coordinator_id:
            row = await self.store.get_session(task_id) if _looks_like_id(task_id) else None
            if row is not None and row["status"] in TERMINAL and await self._belongs(row, coordinator_id):
                why = f": {row['close_reason']}" if row.get("close_reason") else ""
                raise TaskStateError(f"{task_id} is not running ({row['status']}{why})")
            raise NotFound(f"no such task {task_id} in this session")
        if task.status in TERMINAL:
            why = f": {task.close_reason}" if task.close_reason else ""
            raise TaskStateError(f"{task_id} is not running ({task.status}{why})")
        task.stop_requested = True
        task.stop_reason = reason
        if task.cancel_scope is not None:
            task.cancel_scope.cancel()
        with trio.move_on_after(wait_s):
            await task.done.wait()
        return task

    async def _belongs(self, row: dict[str, Any], coordinator_id: str) -> bool:
        parent = row.get("parent_session_id")
        for _ in range(3):
            if parent is None:
                return False
            if parent == coordinator_id:
                return True
            prow = await self.store.get_session(parent)
            parent = prow.get("parent_session_id") if prow else None
        return False

    def forget_finished(self, max_age_s: float = 3600.0) -> None:
        """Drop finished tasks older than ``max_age_s`` (long-running daemon)."""
        now = time.monotonic()
        for tid, task in list(self.tasks.items()):
            if task.status in TERMINAL and now - task.started_monotonic > max_age_s:
                del self.tasks[tid]


def _is_cancellation(exc: BaseException) -> bool:
    """True for ``trio.Cancelled`` and for exception groups holding one."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(lambda e: isinstance(e, trio.Cancelled)) is not None
    return False


def _looks_like_id(value: str) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64
