"""The runtime: coordinator threads and turns (docs/architecture.md §4, §9, §11).

The server talks to it through :meth:`Runtime.open_thread`,
:meth:`Runtime.subscribe`, :meth:`Runtime.submit`, :meth:`Runtime.stop`,
:meth:`Runtime.session_tree`, :meth:`Runtime.session_audit`, :meth:`Runtime.list_threads`
and :meth:`Runtime.session_messages`.  Turns run
in the runtime's own service nursery, never in a client's task.
"""

from __future__ import annotations

import collections
import contextlib
import json
import time
from datetime import datetime
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ongridd.credfilter import redact_credentials
from ongridd.config import Config
from ongridd.errors import Busy, NotFound, ProviderError, TaskStateError
from ongridd.llm.types import Message, ModelClient
from ongridd.logs import get_logger
from ongridd.metrics import TURNS, labelled
from ongridd.render import markdown_html
from ongridd.runtime import frames
from ongridd.runtime.admission import Ticket, TurnAdmission
from ongridd.runtime.agentrun import AgentRunner
from ongridd.runtime.control import ControlDeps, DedupTable, build_control_tools
from ongridd.runtime.hub import SessionHub, UndeliveredEnds
from ongridd.runtime.ports import Row, RuntimeStore, RuntimeWriter
from ongridd.runtime.registries import RegistryHolder
from ongridd.runtime.workers import WorkerManager, WorkerOutcome, WorkerTask
from ongridd.store.pending import JOINED_NAME
from ongridd.store.rows import clean_text, iso, utcnow
from ongridd.tools.runner import SecretTaint
from ongridd.tools.spec import Tool, ToolCallContext

if TYPE_CHECKING:
    from ongridd.store.writer import PendingWrite


@attrs.frozen
class Joined:
    """A message sent while its thread's turn was queued or running, at
    ``at`` (timezone-aware UTC).  ``held``: the id of its ``pending_messages``
    row (a message sent while the turn ran is held there until a stored
    message carries it), or None."""

    text: str
    held: str | None = None
    at: datetime = attrs.field(factory=utcnow)

log = get_logger(__name__)

INTERJECTION_DEBOUNCE_S = 0.3
#: the most characters of a turn's error kept with its thread
TURN_ERROR_CHARS = 2000
#: how long a stopped turn (or one ending during shutdown) waits for its writes
#: before its last frame goes out; the writes themselves stay queued regardless
STOPPED_TURN_WRITE_WAIT_S = 5.0
#: how long the store writer may take to drain at shutdown
WRITER_DRAIN_S = 60.0
#: how long a worker's start waits for its turn's user message to be committed (its ``turn_seq``;
#: the model was asked after that commit, or after this long when the database was out)
USER_MESSAGE_WAIT_S = 10.0
#: the most rows one thread-list, transcript or audit read returns
THREADS_PAGE_MAX = 200
MESSAGES_PAGE_MAX = 2000
AUDIT_PAGE_MAX = 5000
#: the most messages waiting in one turn's inbox (sent while it is queued or
#: runs); one more is refused ``busy`` instead of growing memory without bound
INBOX_MAX = 64
#: coordinator rows (and their (user, thread) keys) kept in memory at most
MAX_CACHED_COORDINATORS = 50_000


@attrs.define(eq=False)
class Turn:
    """A running coordinator turn."""

    session_id: str
    user_id: str
    locale: str | None
    cancel_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    inbox: list[Joined] = attrs.field(factory=list)
    #: this turn's held messages not yet carried by a stored message, by id, in the order they came
    held: dict[str, Joined] = attrs.field(factory=dict)
    #: the held messages the turn's own first message carries (a follow-up turn's: those it answers)
    start_held: list[str] = attrs.field(factory=list)
    #: drained from the inbox for the model, not yet stored: (message, what was held), in order
    drained: collections.deque[tuple[Message, Joined]] = attrs.field(factory=collections.deque)
    stopped_by_user: bool = False
    done: trio.Event = attrs.field(factory=trio.Event)
    control_tools: list[Tool] = attrs.field(factory=list)
    system_prompt: str = ""
    interjections: set[trio.CancelScope] = attrs.field(factory=set)
    pending_interjection: list[str] = attrs.field(factory=list)
    interjecting: bool = False
    #: set (with the interjections cancelled) as soon as the turn's run is
    #: over; from then on nothing of its interjections reaches the client
    ended: bool = False
    #: for the turn_start/turn_end log events: the thread name, when the turn
    #: began (``time.monotonic()``), the coordinator's tool calls and the workers it spawned
    thread: str | None = None
    started: float = attrs.field(factory=time.monotonic)
    tool_calls: int = 0
    workers: int = 0
    #: its slot (ongridd/runtime/admission.py); ``admitted`` once it may run
    ticket: Ticket | None = None
    admitted: bool = False
    #: the queued write of the user message that started it (its seq is the workers' ``turn_seq``)
    user_write: PendingWrite | None = None
    #: the message that started it (None when held: a follow-up turn's, or one that waited for a slot)
    first_text: str | None = None
    #: it answers messages that came during an earlier turn's last model call (:meth:`Runtime._follow_up`)
    follow_up: bool = False
    #: shared by the tool runners of every run of the turn: a call that carries or prints a piece of a held
    #: secret stops them all, and the turn (:func:`_stop_for_secret`)
    secret_taint: SecretTaint = attrs.field(factory=SecretTaint)
    stopped_for_secret: bool = False

    def __attrs_post_init__(self) -> None:
        self.secret_taint.on_set = lambda: _stop_for_secret(self)

    def take_inbox(self) -> list[Message]:
        """The kernel's inbox (``pending_user_messages``): every waiting
        message, removed, as the model reads it."""
        taken, self.inbox[:] = list(self.inbox), []
        out = []
        for joined in taken:
            msg = Message(role="user", content=joined.text, name=JOINED_NAME)
            if joined.held is not None:
                self.drained.append((msg, joined))
            out.append(msg)
        return out

    def settles(self, message: Message, source: str) -> tuple[list[str], datetime | None]:
        """The sink's ``settles``: the held messages the stored row of the
        person's ``message`` carries (``source`` as ``UserMessageEvent``'s),
        and when that one was sent (None: the row's own time)."""
        at = None
        if source == "user":
            ids, self.start_held = self.start_held, []
        elif self.drained and self.drained[0][0] is message:
            joined = self.drained.popleft()[1]
            ids, at = [joined.held or ""], joined.at
        else:
            return [], None
        for held in ids:
            self.held.pop(held, None)
        return ids, at

    def keep_user_write(self, write: PendingWrite) -> None:
        """The sink's ``on_user_message``: the first message a person sent in this turn starts it."""
        if self.user_write is None:
            self.user_write = write

    async def turn_seq(self) -> int | None:
        """The seq of the user message that started this turn, once committed
        (None: no such message, its write failed, or it was not committed
        within :data:`USER_MESSAGE_WAIT_S` — a database outage delays a
        worker's start by that much at most).  Cancellation: only the wait
        is cancelled."""
        write = self.user_write
        if write is None:
            return None
        with trio.move_on_after(USER_MESSAGE_WAIT_S):
            await write.settled()
        return write.result if write.is_done and write.error is None else None

    @property
    def queued(self) -> bool:
        """Waiting for a slot: it has not run and nothing of it is stored."""
        return self.ticket is not None and self.ticket.queued


class Runtime:
    """``config``: Config; ``store``: a RuntimeStore (the daemon's Store);
    ``holder``: RegistryHolder; ``model``: a ModelClient (or a zero-argument
    factory returning one, called lazily on the first turn).  ``clock``: the
    current time as an aware datetime for the per-call reminder (default: the
    system clock).  ``writer``: the queued writer of ``store`` (a
    RuntimeWriter, e.g. ``StoreWriter(store)``); :meth:`run` runs it."""

    def __init__(self, config: Config, store: RuntimeStore, holder: RegistryHolder,
                 model: ModelClient | Callable[[], ModelClient], *, writer: RuntimeWriter,
                 clock: Callable[[], datetime] | None = None):
        self.config = config
        self.store = store
        self.holder = holder
        self._model = model
        self.hubs: dict[str, SessionHub] = {}
        #: the turn-ending frames hubs keep for a client that may re-attach, bounded in all
        self.undelivered = UndeliveredEnds()
        self.turns: dict[str, Turn] = {}
        self.dedup: dict[str, DedupTable] = {}
        # connections attached to a thread (open_thread(hold=True)), and the
        # threads whose empty row release_thread is deleting right now
        self._holds: dict[str, int] = {}
        self._releasing: dict[str, trio.Event] = {}
        # coordinator rows seen (id → row; their owner, thread and parent never change) and
        # (user, thread) → id: an ownership check or a known thread costs no database read
        self._coordinators: collections.OrderedDict[str, Row] = collections.OrderedDict()
        self._thread_ids: dict[tuple[str, str], str] = {}
        self.writer = writer
        self.workers = WorkerManager(store, self._publish, self.writer)
        self.runner = AgentRunner(config=config, store=store, writer=self.writer, workers=self.workers,
                                  model=self._get_model, clock=clock)
        self.nursery: trio.Nursery | None = None
        self.accepting = True
        lim = config.limits
        self.admission = TurnAdmission(max_running=getattr(lim, "max_concurrent_turns", 64),
                                       max_per_user=getattr(lim, "max_turns_per_user", 4),
                                       max_queued=getattr(lim, "max_queued_turns", 256))

    # ---- lifecycle ----------------------------------------------------------
    def _get_model(self) -> ModelClient:
        if callable(self._model) and not hasattr(self._model, "stream"):
            self._model = self._model()
        return self._model  # type: ignore[return-value]  # narrowed above: a client, not the factory

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The store writer and the service nursery; runs until cancelled.

        On exit, once every turn has ended, the writer's queue is drained
        (bounded by ``WRITER_DRAIN_S``; what is left then is logged as an
        error), then every worker row still open is closed ``killed``
        ("daemon shutdown")."""
        async with trio.open_nursery() as writer_nursery:
            await writer_nursery.start(self.writer.run)
            try:
                await self._serve(task_status)
            finally:
                self.workers.shutting_down = True
                with trio.CancelScope(shield=True):
                    await self.writer.aclose(WRITER_DRAIN_S)

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                nursery.start_soon(self._housekeeping)
                await trio.sleep_forever()
        finally:
            self.workers.shutting_down = True
            with trio.CancelScope(shield=True):  # every turn has ended: their last writes go first
                await self.writer.flush(timeout_s=WRITER_DRAIN_S)
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
        self.undelivered.prune()
        for sid, hub in list(self.hubs.items()):
            if sid not in self.turns and hub.idle:
                del self.hubs[sid]

    async def drain(self, grace_s: float) -> None:
        """Stop accepting turns and wait up to ``grace_s`` for running ones;
        then stop the rest (their workers end ``killed``, "daemon shutdown")."""
        self.accepting = False
        self.admission.close()  # queued turns never start now: they end "stopped"
        for turn in list(self.turns.values()):
            if turn.queued:
                _cancel_turn(turn)
        with trio.move_on_after(grace_s):
            while self.turns:
                await next(iter(self.turns.values())).done.wait()
        self.workers.shutting_down = True
        for turn in list(self.turns.values()):
            _cancel_turn(turn)
        with trio.move_on_after(3):
            while self.turns:
                await next(iter(self.turns.values())).done.wait()

    # ---- sessions ---------------------------------------------------------
    def _hub(self, session_id: str) -> SessionHub:
        hub = self.hubs.get(session_id)
        if hub is None:
            hub = self.hubs[session_id] = SessionHub()
        return hub

    def _publish(self, session_id: str, frame: Row) -> None:
        self._hub(session_id).publish(frame)

    async def open_thread(self, *, user_id: str, thread: str, hold: bool = False) -> tuple[str, bool]:
        """The coordinator session of (user, thread): ``(session_id, resumed)``.

        ``hold``: the caller (a chat connection) holds the thread until it
        calls :meth:`release_thread`, which may then delete a row it created
        and never used.  A thread whose empty row is being deleted right now
        is waited for and then created afresh."""
        known = self._thread_ids.get((user_id, thread))
        if known is not None and known not in self._releasing:
            row, created = self._coordinators[known], False
        else:
            while True:
                row, created = await self.store.get_or_create_coordinator(user_id, thread)
                releasing = self._releasing.get(row["id"])
                if releasing is None:
                    break
                await releasing.wait()
            self._remember(row)
            if created:
                self.runner.histories.start_empty(row["id"])
                self.writer.note_empty(row["id"])
        if hold:
            self._holds[row["id"]] = self._holds.get(row["id"], 0) + 1
        return row["id"], not created

    async def release_thread(self, session_id: str, *, created: bool) -> bool:
        """End a hold of :meth:`open_thread` (``hold=True``).  When the hold
        was the last one, ``created`` says the holder's open_thread created
        the row, and the thread is still empty — no turn running or queued,
        no subscriber, and in the database no message, child, audit row,
        turn origin or summary — its row is deleted (a refused or empty
        first message leaves no thread behind).  True when deleted.

        Runs under a bounded shield (5 s): a cancelled connection still
        releases; a failing store is logged, never raised."""
        left = self._holds.get(session_id, 0) - 1
        if left > 0:
            self._holds[session_id] = left
            return False
        self._holds.pop(session_id, None)
        hub = self.hubs.get(session_id)
        if (not created or session_id in self.turns or session_id in self._releasing
                or (hub is not None and (hub.subscriber_count or hub.turn_running))
                or (self.writer.committed_seq(session_id) or 0) > 0):  # it holds messages: not empty
            return False
        done = self._releasing[session_id] = trio.Event()  # open_thread waits for it from here on
        deleted = False
        try:
            with trio.move_on_after(5, shield=True):
                await self.writer.flush(session_id, timeout_s=STOPPED_TURN_WRITE_WAIT_S)  # what it wrote is seen
                if session_id not in self.turns and not self._holds.get(session_id):
                    deleted = await self.store.delete_empty_coordinator(session_id)
        except Exception:  # noqa: BLE001 - the row stays; it is only an empty thread
            log.exception("empty_thread_release_failed", session_id=session_id)
        finally:
            del self._releasing[session_id]
            done.set()
        if deleted:
            self._forget_row(session_id)
            log.info("empty_thread_removed", session_id=session_id)
        return deleted

    @contextlib.contextmanager
    def subscribe(self, session_id: str) -> Iterator[tuple[list[Row], trio.MemoryReceiveChannel[Row]]]:
        """``(initial frames, channel)`` of a coordinator session's frames."""
        with self._hub(session_id).subscribe() as pair:
            yield pair

    def _remember(self, row: Row) -> None:
        """Keep a coordinator row (bounded; the oldest seen is dropped first)."""
        if row.get("parent_session_id") is not None:
            return
        sid = row["id"]
        self._coordinators[sid] = row
        self._coordinators.move_to_end(sid)
        if row.get("thread_id") is not None:
            self._thread_ids[(row["user_id"], row["thread_id"])] = sid
        while len(self._coordinators) > MAX_CACHED_COORDINATORS:
            self._forget_row(next(iter(self._coordinators)))

    def _forget_row(self, session_id: str) -> None:
        row = self._coordinators.pop(session_id, None)
        if row is not None and row.get("thread_id") is not None:
            self._thread_ids.pop((row["user_id"], row["thread_id"]), None)
        self.runner.histories.forget(session_id)

    def forget_cached_threads(self) -> None:
        """Drop every remembered thread row and history (after rows were
        deleted behind the runtime, e.g. by the retention sweep)."""
        for sid in list(self._coordinators):
            self._forget_row(sid)

    async def _owned(self, session_id: str, user_id: str) -> Row:
        row = self._coordinators.get(session_id)
        if row is None:
            row = await self.store.get_session(session_id)
            if row is not None:
                self._remember(row)
        if row is None or row.get("user_id") != user_id:
            raise NotFound(f"no session {session_id}")
        return row

    async def session_tree(self, session_id: str, *, user_id: str) -> Row:
        """The nested tree from ``session_id`` (``{id, agent_id, status,
        description, closed_at, close_reason, …, children: [...]}``).
        Raises NotFound when it does not exist or belongs to another user."""
        await self._owned(session_id, user_id)
        await self.writer.flush(session_id, timeout_s=STOPPED_TURN_WRITE_WAIT_S)  # read what the turn wrote
        tree = await self.store.session_tree(session_id)
        if tree is None:  # deleted (retention) between the ownership check and the read
            raise NotFound(f"no session {session_id}")
        return tree

    async def session_export(self, session_id: str, *, user_id: str) -> Row:
        """The session with its whole tree, messages, audit rows and proposals
        as one document (``ongridd.store.export``).  Raises NotFound as
        :meth:`session_tree`."""
        await self._owned(session_id, user_id)
        await self.writer.flush(session_id, timeout_s=STOPPED_TURN_WRITE_WAIT_S)
        doc = await self.store.export_tree(session_id)
        if doc is None:
            raise NotFound(f"no session {session_id}")
        return doc

    async def session_origins(self, session_id: str, *, user_id: str) -> list[Row]:
        """Where the session's bridged turns came from, oldest first: ``{platform, im_user,
        conversation, message_seq, created_at}`` (``message_seq``: the seq of the turn's user
        message; None for a message that went into a turn already running).  ``[]`` for a thread
        no bridge started a turn in.  Raises NotFound as :meth:`session_tree`."""
        await self._owned(session_id, user_id)
        rows = await self.store.list_origins(session_id)
        keys = ("platform", "im_user", "conversation", "message_seq", "created_at")
        return [{k: r.get(k) for k in keys} for r in rows]

    async def session_audit(self, session_id: str, *, user_id: str, limit: int = AUDIT_PAGE_MAX,
                            offset: int = 0) -> list[Row]:
        """Audit rows of the session and its children, oldest first, at most
        ``limit`` after ``offset`` (``{id, session_id, agent_id, tool_name,
        tool_call_id, arguments, result, status, duration_ms, created_at,
        proposal}``; ``proposal``: the gated call's review —
        ``{decision, decision_reason, reviewer_session_id, …}`` — or None).
        Raises NotFound as :meth:`session_tree`."""
        await self._owned(session_id, user_id)
        await self.writer.flush(session_id, timeout_s=STOPPED_TURN_WRITE_WAIT_S)
        return await self.store.list_audit_items(session_id, include_children=True,
                                                 limit=max(1, min(limit, AUDIT_PAGE_MAX)), offset=max(0, offset))

    async def list_threads(self, *, user_id: str, limit: int = 50, before: datetime | None = None,
                           before_id: str | None = None) -> list[Row]:
        """The caller's coordinator threads, newest activity first: ``{id, thread,
        status, created_at, updated_at, last_user_text, running, last_turn,
        last_turn_error}`` (``last_turn``: ``running``, ``completed`` when the last
        message is an answer, ``interrupted`` otherwise, None for a thread without
        messages; ``last_turn_error``: for an ``interrupted`` one, the error its turn
        ended with — ``"provider_error: …"``, ``"stopped: …"`` — or None when the
        turn left none, as one cut off by a crash).
        ``before``/``before_id``: the cursor of :meth:`Store.list_threads`."""
        rows = await self.store.list_threads(user_id, limit=max(1, min(limit, THREADS_PAGE_MAX)), before=before,
                                             before_id=before_id)
        out = []
        for r in rows:
            running = r["id"] in self.turns
            if running:
                last_turn = "running"
            elif r["last_role"] is None:
                last_turn = None
            else:
                last_turn = "completed" if r["last_role"] == "assistant" and not r["last_has_tool_calls"] \
                    else "interrupted"
            out.append({k: r[k] for k in ("id", "thread", "status", "created_at", "updated_at", "last_user_text")}
                       | {"running": running, "last_turn": last_turn,
                          "last_turn_error": r["last_turn_error"] if last_turn == "interrupted" else None})
        return out

    async def session_messages(self, session_id: str, *, user_id: str, after_seq: int = 0,
                               limit: int = 500) -> list[Row]:
        """The stored transcript of a session of the caller, in seq order:
        ``{seq, role, content, html, tool_calls, tool_call_id, created_at}``
        (``html``: the sanitised rendering of assistant text, else None; a
        user message sent while the thread's turn ran, which that turn
        answered, also has ``joined: true``), at most ``limit``
        (≤ MESSAGES_PAGE_MAX) after ``after_seq``; on the last page, after
        them, the messages sent while the running turn runs that its model
        has not read yet (``joined: true, held: true, seq: null``; they get
        their place once it has).  NotFound as :meth:`session_tree`.  The page's markdown is
        rendered in a worker thread; cancelling waits for that render to end."""
        await self._owned(session_id, user_id)
        await self.writer.flush(session_id, timeout_s=STOPPED_TURN_WRITE_WAIT_S)
        limit = max(1, min(limit, MESSAGES_PAGE_MAX))
        rows = await self.store.list_messages(session_id, after_seq=max(0, after_seq), limit=limit)
        # stored summaries of older turns (the history budget), each right after the last message it
        # covers; on a full page only those up to its last seq (the next page has the rest)
        upto = rows[-1]["seq"] if rows and len(rows) >= limit else None
        summaries = await self.store.list_summaries(session_id, after_seq=max(0, after_seq), through_seq=upto)
        # the page's markdown is rendered in a worker thread: a page of long answers takes a while
        # the first time (then ongridd.render remembers them), and the event loop keeps serving meanwhile
        out = await trio.to_thread.run_sync(_page_items, rows, summaries, limiter=PAGE_RENDER_LIMITER)
        turn = self.turns.get(session_id)
        held = list(turn.held.values()) if turn is not None else []
        if held and len(out) + len(held) < limit:  # still the last page: a client reads no further
            out += [{"seq": None, "role": "user", "content": clean_text(j.text), "html": None,  # as it will be stored
                     "tool_calls": None, "tool_call_id": None, "created_at": iso(j.at), "joined": True,
                     "held": True} for j in held]
        return out

    # ---- turns -----------------------------------------------------------------
    def reserve_turn(self, session_id: str, *, user_id: str) -> Ticket:
        """A place in the turn queue for a new turn of ``user_id`` in this
        thread, taken now: raises Busy (nothing queued) when the queue is
        full.  Hand it to :meth:`submit` (``ticket=``), or ``release()`` it
        when the turn will not be submitted.  Lets a caller store what it
        must before the turn starts (a bridge's turn origin) only once the
        turn is sure to be admitted."""
        return self._ticket(session_id, user_id)

    async def submit(self, session_id: str, *, user_id: str, text: str, locale: str | None = None,
                     ticket: Ticket | None = None) -> None:
        """Start a turn with ``text``, or — while one runs — interject it.

        Returns once the turn (or interjection) is started — or queued for a
        slot (§4 Load; a message for a thread whose turn waits joins it);
        raises NotFound for a session of another user, and Busy (nothing run
        or stored) while shutting down or when the queue is full.
        ``ticket``: a place from :meth:`reserve_turn` (used for a new turn;
        released when the message joins a running turn or on any error).
        """
        try:
            await self._submit(session_id, user_id=user_id, text=text, locale=locale, ticket=ticket)
        except BaseException:
            handed = self.turns.get(session_id)
            if ticket is not None and (handed is None or handed.ticket is not ticket):
                ticket.release()  # not handed to a turn (that releases it when it ends)
            raise

    async def _submit(self, session_id: str, *, user_id: str, text: str, locale: str | None,
                      ticket: Ticket | None) -> None:
        row = await self._owned(session_id, user_id)
        if row.get("parent_session_id") is not None:
            raise NotFound(f"{session_id} is not a chat thread")
        if not self.accepting or self.nursery is None:
            raise Busy("the daemon is shutting down; nothing was run or stored; send it again once it is back")
        running = self.turns.get(session_id)
        if running is not None and ticket is not None:  # joins the running turn: no new turn to hold a place for
            ticket.release()
            ticket = None
        if running is not None and len(running.inbox) >= INBOX_MAX:
            raise Busy(f"this thread already has {len(running.inbox)} messages waiting for its turn; "
                       "send again once it has answered")
        if running is not None:  # joins it, held until a stored message carries it
            running.inbox.append(self._hold(running, text))
            if running.queued or running.ended:  # read when it runs; or too late: its follow-up turn answers it
                return
            running.pending_interjection.append(text)
            if not running.interjecting:  # one interjection call at a time; later messages are batched
                running.interjecting = True
                self.nursery.start_soon(self._interject, running)
            return
        if ticket is None:
            ticket = self._ticket(session_id, user_id)  # Busy: refused, nothing run or stored
        turn = Turn(session_id=session_id, user_id=user_id, locale=locale, thread=row.get("thread_id"),
                    ticket=ticket, first_text=text)
        if ticket.queued:  # it waits for a slot: its message is held meanwhile (a crash keeps it)
            joined = self._hold(turn, text)
            if joined.held is not None:
                turn.start_held, turn.first_text = [joined.held], None
        self.turns[session_id] = turn
        self._hub(session_id).turn_running = True
        self.nursery.start_soon(self._run_turn, turn, text)

    async def stop(self, session_id: str, *, user_id: str, task_id: str | None = None) -> None:
        """Stop one worker (``task_id``) or the whole running turn.

        Raises NotFound / TaskStateError (nothing is changed then).
        """
        await self._owned(session_id, user_id)
        if task_id:
            await self.workers.stop(task_id, coordinator_id=session_id, reason="stopped by the user")
            return
        turn = self.turns.get(session_id)
        if turn is None:
            raise TaskStateError("no turn is running in this thread")
        turn.stopped_by_user = True
        _cancel_turn(turn)
        with trio.move_on_after(5):
            await turn.done.wait()

    def _control_deps(self, turn: Turn, spawnable: list[str],
                      spawn: Callable[[ToolCallContext, str, str, str], Awaitable[WorkerOutcome]]) -> ControlDeps:
        async def stop(task_id: str) -> WorkerTask:
            return await self.workers.stop(task_id, coordinator_id=turn.session_id,
                                           reason="stopped by the coordinator (TaskStop)")

        return ControlDeps(
            spawnable=spawnable,
            spawn=spawn,
            stop=stop,
            interim=lambda text: self._publish_during(turn, frames.interim(text)),
            dedup=self.dedup.setdefault(turn.session_id, DedupTable()),
            result_max_chars=self.config.limits.tool_result_max_chars,
        )

    async def _run_turn(self, turn: Turn, text: str) -> None:
        hub = self._hub(turn.session_id)
        end = frames.error("internal", "the turn ended without an answer")
        status = "error"
        try:
            with turn.cancel_scope:
                await self._wait_for_slot(turn)
                snap = self.holder.current
                agents = snap.agents.snapshot()

                async def spawn(ctx: ToolCallContext, persona: str, description: str, prompt: str) -> WorkerOutcome:
                    turn.workers += 1

                    def created(task_id: str) -> None:
                        # kept with the AgentTool call if the turn is stopped first: the worker is then
                        # closed killed (WorkerManager.spawn), and the transcript can link to it
                        ctx.notes.update(task_id=task_id, subagent_type=persona, worker_status="killed")

                    return await self.runner.spawn_worker(
                        snap=snap, agents=agents, persona=persona, description=description, brief=prompt,
                        parent_id=turn.session_id, coordinator_id=turn.session_id, user_id=turn.user_id,
                        turn_seq=await turn.turn_seq(), on_created=created, taint=turn.secret_taint)

                spawnable = [p.name for p in snap.agents.spawnable(agents)]
                turn.control_tools = build_control_tools(self._control_deps(turn, spawnable, spawn))
                def publish(frame: dict[str, Any]) -> None:
                    if frame.get("type") == "tool" and frame.get("status") == "started":
                        turn.tool_calls += 1  # counted as they start: a stopped turn's calls count too
                    self._publish(turn.session_id, frame)

                result = await self.runner.run_coordinator(snap=snap, agents=agents, turn=turn, text=text,
                                                           publish=publish)
                status = result.status
                turn.tool_calls = max(turn.tool_calls, result.tool_calls)
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
                                   else frames.SECRET_STOPPED if turn.stopped_for_secret
                                   else frames.SHUTDOWN_STOPPED)
        except ProviderError as exc:
            status, end = "provider_error", frames.error("provider_error", str(exc))
        except Exception as exc:
            log.exception("turn_failed", session_id=turn.session_id)
            status, end = "error", frames.error("internal", f"internal error: {exc!r}")
        finally:
            _end_interjections(turn)  # they belong to this turn: none may emit after its final
            if turn.admitted and turn.user_write is None and turn.first_text:
                # stopped (or failed) before its first model call stored what the person sent: kept
                self._keep_unseen(turn, [Joined(turn.first_text)])
            if turn.inbox and (turn.cancel_scope.cancel_called or not self.accepting):
                self._keep_unseen(turn, turn.inbox)
                turn.inbox.clear()
            waiting = {j.held for j in turn.inbox}
            # held, never in the model's view and not waiting for a follow-up: drained when a stop cut the
            # run off before they were stored, or the messages of a follow-up turn stopped while it queued
            self._keep_unseen(turn, [j for held, j in turn.held.items() if held not in waiting])
            if end.get("type") == "error" and turn.admitted:  # why it has no answer, for a later reader
                why = redact_credentials(f"{end.get('code')}: {end.get('message')}")
                self.writer.note_turn_error(turn.session_id, why[:TURN_ERROR_CHARS], owner=turn.session_id)
            status, end = await self._settle_writes(turn, status, end)
            # From here on no await: a message submitted now starts a new turn.
            leftover = [j for j in turn.inbox if j.text]  # only a non-empty text is held
            turn.inbox.clear()
            self.turns.pop(turn.session_id, None)
            if turn.ticket is not None:
                turn.ticket.release()
            labelled(TURNS, status).inc()
            if not turn.admitted:
                log.info("turn_unqueued", user=turn.user_id, thread=turn.thread, session_id=turn.session_id)
            else:
                log.info("turn_end", user=turn.user_id, thread=turn.thread, session_id=turn.session_id,
                         status=turn_outcome(status), duration_ms=int((time.monotonic() - turn.started) * 1000),
                         tool_calls=turn.tool_calls, workers=turn.workers)
            hub.end_turn(end)
            for dropped in self.undelivered.note(turn.session_id, hub):
                log.info("undelivered_answer_dropped", session_id=dropped,
                         reason="too many answers waiting for a client to re-attach; the transcript has it")
            turn.done.set()
            if leftover:
                self._follow_up(turn, leftover)

    def _ticket(self, session_id: str, user_id: str, *, force: bool = False) -> Ticket:
        return self.admission.enqueue(user_id, force=force,
                                      on_position=lambda n: self._publish(session_id, frames.queued(n)))

    async def _wait_for_slot(self, turn: Turn) -> None:
        """Wait in the admission queue (§4 Load), then log ``turn_start``.
        A follow-up turn queues without the bound.  Cancelled while queued
        (stop, shutdown): the turn never runs and its messages, held while it
        waited (a crash keeps them for the start-up recovery), are dropped —
        none is stored; a follow-up turn's messages, sent to the turn before,
        are stored unanswered by :meth:`_run_turn`."""
        if turn.ticket is None:
            turn.ticket = self._ticket(turn.session_id, turn.user_id, force=True)
        try:
            await turn.ticket.wait()
        except BaseException:
            turn.inbox.clear()
            if not turn.follow_up and turn.held:  # told "not sent": the rows held for it go too
                self.writer.drop_held(turn.session_id, list(turn.held), owner=turn.session_id)
                turn.held.clear()
                turn.start_held = []
            raise
        turn.admitted = True
        if turn.ticket.waited:
            self._publish(turn.session_id, frames.queued(0))
        turn.started = time.monotonic()
        log.info("turn_start", user=turn.user_id, thread=turn.thread, session_id=turn.session_id)

    def _hold(self, turn: Turn, text: str) -> Joined:
        """``text``, sent while ``turn`` runs, held in the database until a stored message
        carries it: a crash before that (a worker may run for minutes) loses nothing — the
        start-up recovery appends it to the thread.  Committed at once, not awaited (the
        interjection call that acknowledges it waits for that)."""
        if not text:
            return Joined(text)
        held = self.writer.hold_message(turn.session_id, owner=turn.session_id, content=text)
        held.commit_soon()
        joined = Joined(text, held.values["id"], held.at or utcnow())
        turn.held[held.values["id"]] = joined
        return joined

    def _keep_unseen(self, turn: Turn, messages: list[Joined]) -> None:
        """Messages of a turn its model never read (a stop, a shutdown):
        stored in the thread (each carrying its held row) so the next turn sees them."""
        for joined in messages:
            if not joined.text:
                continue
            settles = [joined.held] if joined.held is not None else []
            self.writer.append_message(turn.session_id, owner=turn.session_id, role="user", content=joined.text,
                                       settles=settles, at=joined.at if settles else None)
            turn.held.pop(joined.held or "", None)

    async def _settle_writes(self, turn: Turn, status: str, end: Row) -> tuple[str, Row]:
        """Wait until the turn's writes are committed, so its last frame only
        goes out once the transcript, audit rows and worker rows can be read;
        returns ``(status, end)``, turned into ``error``/``internal`` when a
        write of this thread finally failed.  Shielded: runs in the turn's
        ``finally:``.  A stopped turn waits at most STOPPED_TURN_WRITE_WAIT_S
        (its writes stay queued and are committed anyway)."""
        stopping = turn.cancel_scope.cancel_called or not self.accepting
        wait_s = STOPPED_TURN_WRITE_WAIT_S if stopping else self.writer.retry_for_s + 30.0
        with trio.CancelScope(shield=True):
            settled = await self.writer.flush(turn.session_id, timeout_s=wait_s)
        if not settled:
            log.warning("turn_writes_still_queued", session_id=turn.session_id, queued=self.writer.queued)
            if end.get("type") == "final":  # a final promises stored rows: never before they are
                return "error", frames.error(
                    "internal", "the answer was not stored in time (the database is slow or unavailable); its "
                                "rows stay queued and are written once the database answers — see the daemon log")
        failures = self.writer.take_failures(turn.session_id)
        if failures and end.get("type") == "final":
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            return "error", frames.error("internal", f"the answer could not be stored completely: {failures[0]}"
                                         f"{more}; see the daemon log")
        return status, end

    def _follow_up(self, turn: Turn, leftover: list[Joined]) -> None:
        """Messages that arrived during the turn's last model call (too late
        for it) get a turn of their own, so no user message goes unanswered
        (its first message carries their held rows)."""
        if not self.accepting or self.nursery is None or turn.session_id in self.turns:
            log.warning("follow_up_dropped", session_id=turn.session_id)
            self._keep_unseen(turn, leftover)  # stored unanswered: the next turn sees them
            return
        held = {j.held: j for j in leftover if j.held is not None}
        follow = Turn(session_id=turn.session_id, user_id=turn.user_id, locale=turn.locale, thread=turn.thread,
                      held=held, start_held=list(held), follow_up=True)
        self.turns[turn.session_id] = follow
        self._hub(turn.session_id).turn_running = True
        self.nursery.start_soon(self._run_turn, follow, "\n\n".join(j.text for j in leftover))

    async def _interject(self, turn: Turn) -> None:
        """Interjection calls, one at a time: each is one model call in which
        the coordinator may only SendMessage and TaskStop, told of the new
        message(s) and its running workers.  Messages that arrive meanwhile
        are batched into the next call (a flood costs a few calls, not one
        each).  The end of the turn — an answer, an error, a stop or a
        shutdown — cancels them, the debounce wait included, and drops
        whatever they would still publish: the messages stay in the turn's
        inbox and its follow-up turn answers them (:meth:`_run_turn`)."""
        with trio.CancelScope() as scope:
            turn.interjections.add(scope)
            try:
                while turn.pending_interjection and not turn.ended:
                    await trio.sleep(INTERJECTION_DEBOUNCE_S)  # gather a burst of messages into one call
                    texts, turn.pending_interjection[:] = list(turn.pending_interjection), []
                    # what the call acknowledges is stored first; not stored in time (a database
                    # outage): no acknowledgement — the turn's next model call still reads the messages
                    if not await self.writer.flush(turn.session_id, timeout_s=USER_MESSAGE_WAIT_S):
                        log.warning("interjection_skipped", session_id=turn.session_id,
                                    reason="the message was not stored in time")
                        continue
                    try:
                        await self.runner.run_interjection(
                            turn=turn, text="\n\n".join(texts), running=self.workers.running(turn.session_id),
                            publish=lambda f: self._publish_during(turn, f))
                    except Exception:
                        log.exception("interjection_failed", session_id=turn.session_id)
            finally:
                turn.interjections.discard(scope)
                turn.interjecting = False

    def _publish_during(self, turn: Turn, frame: Row) -> None:
        """Publish a frame of ``turn`` only while it runs (an interjection
        woken with its model answer just as the turn ended must not reach a
        client after the turn's last frame)."""
        if turn.ended:
            log.info("frame_after_turn_end_dropped", session_id=turn.session_id, frame=frame.get("type"))
            return
        self._publish(turn.session_id, frame)


def _with_interim_html(calls: list[Row] | None) -> list[Row] | None:
    """A message's tool calls, each ``SendMessage`` with the ``html`` its ``interim`` frame carried
    (the sanitised rendering of its ``text``), so a transcript shows it as it was shown live."""
    if not calls or not any(c.get("name") == "SendMessage" for c in calls):
        return calls
    out = []
    for call in calls:
        if call.get("name") == "SendMessage":
            try:
                text = json.loads(call.get("arguments") or "{}").get("text")
            except (ValueError, AttributeError, RecursionError):  # not the tool's shape; nested too deep to read
                text = None
            if isinstance(text, str) and text.strip():
                call = call | {"html": markdown_html(text.strip())}
        out.append(call)
    return out


#: transcript pages rendered at once (each in a worker thread)
PAGE_RENDER_LIMITER = trio.CapacityLimiter(2)


def _page_items(rows: list[Row], summaries: list[Row]) -> list[Row]:
    """A transcript page's items (see :meth:`Runtime.session_messages`) with their ``html``: stored
    messages, with the summaries placed among them.  Pure; run in a worker thread."""
    out = [{"seq": r["seq"], "role": r["role"], "content": r["content"],
            "html": markdown_html(r["content"]) if r["role"] == "assistant" and r["content"] else None,
            "tool_calls": _with_interim_html(r["tool_calls"]), "tool_call_id": r["tool_call_id"],
            "created_at": r["created_at"]}
           | ({"joined": True} if r["role"] == "user" and r.get("name") == JOINED_NAME else {})
           for r in rows]
    return _with_summaries(out, summaries)


def _with_summaries(items: list[Row], summaries: list[Row]) -> list[Row]:
    """Transcript items with a ``role: summary`` item after the message each
    summary covers up to (``seq`` = its ``through_seq``; ``summary``:
    ``{through_seq, source, summarizer_session_id}``); message items keep
    their shape."""
    if not summaries:
        return items
    out: list[Row] = []
    pending = list(summaries)
    for item in items:
        while pending and pending[0]["through_seq"] < item["seq"]:
            out.append(_summary_item(pending.pop(0)))
        out.append(item)
    out.extend(_summary_item(s) for s in pending)
    return out


def _summary_item(s: Row) -> Row:
    return {"seq": s["through_seq"], "role": "summary", "content": s["content"], "html": markdown_html(s["content"]),
            "tool_calls": None, "tool_call_id": None, "created_at": s["created_at"],
            "summary": {"through_seq": s["through_seq"], "source": s["source"],
                        "summarizer_session_id": s["summarizer_session_id"]}}


def turn_outcome(status: str) -> str:
    """The ``turn_end`` status of a coordinator run status: ``completed``
    (an answer, also one forced at a limit), ``failed`` (the model provider
    failed), ``stopped`` (user stop or shutdown) or ``error`` (internal)."""
    if status in ("ok", "max_turns", "tool_budget"):
        return "completed"
    if status == "provider_error":
        return "failed"
    if status == "stopped":
        return "stopped"
    return "error"


def _end_interjections(turn: Turn) -> None:
    """Mark ``turn`` ended and cancel its interjection calls (no await: the
    caller publishes the turn's last frame afterwards).  Messages waiting for
    an interjection stay in ``turn.inbox`` for the follow-up turn."""
    turn.ended = True
    turn.pending_interjection.clear()
    for scope in list(turn.interjections):
        scope.cancel()


def _stop_for_secret(turn: Turn) -> None:
    """A tool call of ``turn`` carried or printed part of a held secret: stop the turn at once, so
    no model of it is called again (a worker whose calls had answered before would otherwise say
    what they told it)."""
    log.warning("turn_stopped_for_secret", session_id=turn.session_id, user=turn.user_id)
    turn.stopped_for_secret = True
    _cancel_turn(turn)


def _cancel_turn(turn: Turn) -> None:
    """Cancel a turn and its interjection calls (its workers run inside it)."""
    turn.cancel_scope.cancel()
    for scope in list(turn.interjections):
        scope.cancel()
