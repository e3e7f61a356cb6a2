"""The long-lived store writer: writes that may be delayed, never dropped.

A turn hands its writes (messages, audit rows, session creation, status
changes and closes) to one :class:`StoreWriter` instead of awaiting the
database itself.  The hand-off is synchronous — :meth:`StoreWriter.append_message`
and friends append to an in-memory queue and return a :class:`PendingWrite`
at once — so no cancellation of the submitting task can lose it.  The
writer's own task, started in a long-lived nursery, commits the queue:

* **Group commit.**  Writes nobody waits for yet are held for up to
  ``linger_s`` (default 1 s, longer than a typical model step and most
  worker runs between two durability points) so that the writes of the
  next steps join them; a waiter — :meth:`PendingWrite.wait`, :meth:`PendingWrite.settled`,
  :meth:`flush` — or a full batch ends the hold at once.  So durability is
  awaited only where it is promised (a worker's row before its tile, a
  failed or stopped worker's close before its result, a turn's writes
  before its ``final``); a kill -9
  loses at most the last ``linger_s`` of writes of turns that had not
  answered yet (the start-up recovery sweep closes their rows).  A held
  row's times (``created_at``, ``started_at``, ``closed_at``) are those of
  its submission, not of the commit.
* **Batches.**  Everything queued when the writer commits (up to ``max_batch``
  writes) is committed in one transaction in one worker-thread hop — on
  SQLite a batch of at most ``inline_max`` writes with nothing queued behind
  it on the event loop's thread instead, never waiting for the lock there
  (see :meth:`StoreWriter._commit_inline`) — in submission order, by :func:`apply_batch_fast`: prebuilt statements with
  bind parameters run on the DBAPI connection (:mod:`ongridd.store.fastsql`),
  one multi-row insert per table, no existence checks and no read-back.  Seqs are still 1, 2, 3, … per session without gaps: the
  writer keeps the last seq it committed per session; for a session it has
  not written yet the top seq is read (under the session row's lock on
  PostgreSQL).  Any failure drops that cache, and the batch is retried one
  write per transaction on the checked path (:func:`apply_batch`: session
  row locked, top seq read, NotFound for an unknown session).
* **Transient errors** (SQLite "database is locked", a lost connection, a
  PostgreSQL deadlock or serialization failure; see
  :func:`ongridd.store.engine.is_transient`) roll the transaction back and
  retry it with exponential backoff for up to ``retry_for_s`` seconds.
* **A batch that fails otherwise** (one bad row: an unknown session, a
  constraint) is retried one write per transaction, so one bad row never
  takes the others with it.
* **A write that finally fails** is logged as an ERROR (``store_write_failed``
  with what, session and owner) and recorded against its ``owner`` — the
  coordinator session whose turn made it — where :meth:`take_failures`
  hands it to the turn, which then ends with an ``error`` frame instead of
  a silent ``final``.
* **Read barriers.**  :meth:`flush` waits until every write submitted so far
  for a session or owner (or for everyone) has been committed or has
  finally failed, so a history load or an audit read sees what came before.
* **Shutdown.**  :meth:`aclose` stops the writer only once the queue is
  empty (bounded by its timeout); writes still queued when the bound runs
  out are each logged as an ERROR — after a SIGKILL the start-up recovery
  sweep closes what was left open.

Typical use (the runtime does this in its service nursery)::

    writer = StoreWriter(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        ...
        pending = writer.append_message(session_id, owner=session_id, role="user", content="hi")
        seq = await pending.wait()          # optional: only when the seq is needed
        ...
        await writer.aclose()               # drains the queue, then run() returns

or, where only a store is at hand (tests, tools)::

    async with running_writer(store) as writer:
        ...
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Engine

from ongridd.errors import OngridError, StoreError
from ongridd.logs import get_logger
from ongridd.metrics import STORE_QUEUE, STORE_TRANSACTIONS, STORE_WRITES, labelled
from ongridd.store import audit, messages, pending, sessions
from ongridd.store.engine import NotNow, describe_error, is_transient, write_tx
from ongridd.store.fastsql import Prepared, raw_write_tx
from ongridd.store.rows import TERMINAL_STATUSES, check_choice, check_text, clean_text, iso, new_id, utcnow
from ongridd.store.schema import audit_logs, chat_messages, chat_sessions
from ongridd.store.store import Store, audit_values, message_values, session_values

log = get_logger(__name__)

DEFAULT_MAX_BATCH = 500
#: 1 s rather than 250 ms: a turn with one worker (six model steps of ~0.1 s) then commits at its
#: durability points only (the person's message, the worker's row, the final): one transaction
#: less per turn, whose commit also woke the idle daemon mid-worker — measured 0.6–0.8 ms less
#: daemon CPU per turn; what a kill -9 can lose is still only writes of turns not yet answered
DEFAULT_LINGER_S = 1.0
#: SQLite: a batch of at most this many writes, with nothing queued behind it, is committed on the
#: event loop's thread (no thread hop; the lock is never waited for there); 0: always in a thread.
#: 32 holds a worker's last steps, its close and the coordinator's next step (about 20 writes)
DEFAULT_INLINE_MAX = 32
#: after every so many commits on the loop's thread (which skip SQLite's automatic checkpoint),
#: a WAL checkpoint is started in the background.  Each checkpoint syncs the WAL and the
#: database file and slows the commits that run beside it: one per 512 commits instead of 128
#: made an agent flow about 6 % faster (measured), for a WAL that peaks near 20 MB, not 10
INLINE_CHECKPOINT_EVERY = 512
#: when this many loop-thread commits have gone by since a background checkpoint began and none
#: could start since (the last has not finished: its thread gets little CPU), the next batch is
#: committed in a thread, where SQLite's automatic checkpoint runs: the WAL stays bounded whatever
#: the scheduling
INLINE_CHECKPOINT_LAG_MAX = INLINE_CHECKPOINT_EVERY
DEFAULT_RETRY_FOR_S = 300.0
DEFAULT_DRAIN_S = 60.0
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 5.0
#: failures kept per owner until a turn takes them (older ones are only in the log)
MAX_FAILURES_KEPT = 20

#: sessions whose last seq is cached at most (the cache is dropped past it)
SEQ_CACHE_MAX = 20_000

KINDS = ("create_session", "mark_running", "message", "audit", "close_session", "usage", "turn_error",
         "hold_message", "drop_held")


@attrs.define(eq=False)
class PendingWrite:
    """One queued write.

    ``kind``: one of ``create_session|mark_running|message|audit|close_session|usage|turn_error|hold_message|drop_held``;
    ``session_id``: the row's session; ``owner``: the coordinator session
    whose turn made it (failures are reported there).  ``done`` (an event)
    is set and ``is_done`` true once the write was committed (``result``:
    the new session row, the message's seq, the audit row id, the held
    message's id, or the bool/row of a status change) or finally failed (``error``: a
    StoreError/NotFound/ValueError, already logged).
    """

    kind: str
    session_id: str
    owner: str
    values: dict[str, Any]
    result: Any = None
    error: BaseException | None = None
    #: submission order (the writer's counter) and the writer's "someone waits for me" hook
    number: int = 0
    #: when it was submitted (timezone-aware UTC): the time its row carries (``created_at``,
    #: ``started_at``, ``closed_at``), however long the group commit held it; None: the commit's
    at: datetime | None = None
    urge: Callable[[PendingWrite], None] | None = attrs.field(default=None, repr=False)
    #: the event behind ``done`` is made only for a waiter (most writes have none)
    is_done: bool = attrs.field(default=False, init=False)
    _event: trio.Event | None = attrs.field(default=None, init=False, repr=False)

    @property
    def done(self) -> trio.Event:
        """Set once the write is committed or finally failed."""
        if self._event is None:
            self._event = trio.Event()
            if self.is_done:
                self._event.set()
        return self._event

    def _set_done(self) -> None:
        self.is_done = True
        if self._event is not None:
            self._event.set()

    @property
    def what(self) -> str:
        return self.kind.replace("_", " ")

    def commit_soon(self) -> None:
        """End the writer's group-commit hold for this write (and those
        queued before it) without waiting for it."""
        if not self.is_done and self.urge is not None:
            self.urge(self)

    async def settled(self) -> None:
        """Wait until the write is committed or finally failed (ends the
        writer's group-commit hold for it); never raises its error.
        Cancellation: only the wait is cancelled."""
        if not self.is_done:
            if self.urge is not None:
                self.urge(self)
            await self.done.wait()

    async def wait(self) -> Any:
        """Wait until the write is committed and return its result; raises
        its error when it finally failed.  Cancellation: only the wait is
        cancelled — the write stays queued and happens anyway."""
        await self.settled()
        if self.error is not None:
            raise self.error
        return self.result


#: the writers running now; the queue gauge adds up their queues when /metrics is read
#: (nothing to update on every write)
_RUNNING: weakref.WeakSet[StoreWriter] = weakref.WeakSet()
STORE_QUEUE.set_function(lambda: sum(len(w._queue) for w in list(_RUNNING)))


class StoreWriter:
    """Commits queued writes of one :class:`Store` (see the module doc).

    ``max_batch``: writes per transaction; ``linger_s``: how long writes
    nobody waits for are held for group commit (0: commit as soon as the
    writer runs); ``retry_for_s``: how long transient errors are retried
    before a write counts as failed; ``inline_max``: on SQLite, the largest
    batch committed on the event loop's own thread when nothing else is
    queued (0: never) — no thread hop, and the write lock is never waited
    for there (held elsewhere: the batch goes to a thread, which waits).
    """

    def __init__(self, store: Store, *, max_batch: int = DEFAULT_MAX_BATCH,
                 linger_s: float = DEFAULT_LINGER_S, retry_for_s: float = DEFAULT_RETRY_FOR_S,
                 clock: Callable[[], float] = time.monotonic, inline_max: int = DEFAULT_INLINE_MAX):
        if max_batch < 1:
            raise ValueError(f"max_batch: expected a positive integer, got {max_batch!r}")
        if not linger_s >= 0:
            raise ValueError(f"linger_s: expected a number >= 0, got {linger_s!r}")
        self.store = store
        self.max_batch = max_batch
        self.linger_s = linger_s
        self.inline_max = inline_max if store._db.engine.dialect.name == "sqlite" else 0
        #: commits on the event loop's thread (of ``transactions``), and the eligible batches seen
        self.inline_commits = 0
        self._since_checkpoint = 0  # inline commits since the last background checkpoint began
        self._submitted = 0  # PendingWrite.number of the newest write
        self._urgent_upto = 0  # a waiter waits for the writes numbered up to this
        self.retry_for_s = retry_for_s
        self._clock = clock
        self._queue: deque[PendingWrite] = deque()
        self._inflight: list[PendingWrite] = []  # the batch being committed
        self._wakeup = trio.Event()
        self._last: dict[str, PendingWrite] = {}  # session id / owner → its newest queued write
        self._last_any: PendingWrite | None = None
        self._failures: dict[str, list[str]] = {}
        self._closing = False
        self._stopped = trio.Event()
        self._started = False
        self._scope: trio.CancelScope | None = None
        #: counters for tests and metrics: commits (transactions) and writes committed
        self.transactions = 0
        #: the last committed seq per session (the batched path counts on from it; cleared on any failure)
        self._seqs: dict[str, int] = {}
        self.committed = 0
        self.failed = 0

    # ---- hand-off (synchronous: cannot be lost to a cancellation) ----------

    @property
    def queued(self) -> int:
        """Writes not committed (nor failed) yet."""
        return len(self._queue) + sum(not w.is_done for w in self._inflight)

    def create_session(self, *, owner: str, agent_id: str, user_id: str, parent_session_id: str | None,
                       description: str | None = None, status: str = "pending",
                       thread_id: str | None = None, turn_seq: int | None = None) -> PendingWrite:
        """Queue a new session row (arguments as :meth:`Store.create_session`).

        The id is chosen now (``pending.session_id``), so a close queued
        after it applies to it even when the creator was cancelled before
        the insert committed.  Result: the row dict.
        """
        session_id = new_id()
        return self._submit("create_session", session_id, owner, lambda: {
            **session_values(agent_id=agent_id, user_id=user_id, parent_session_id=parent_session_id,
                             thread_id=thread_id, description=description, status=status, turn_seq=turn_seq),
            "session_id": session_id})

    def mark_running(self, session_id: str, *, owner: str) -> PendingWrite:
        """Queue ``pending → running`` (as :meth:`Store.mark_running`; result: the row or None)."""
        return self._submit("mark_running", session_id, owner, dict)

    def append_message(self, session_id: str, *, owner: str, role: str, content: str | None,
                       tool_calls: Iterable[Any] | None = None, tool_call_id: str | None = None,
                       name: str | None = None, settles: Sequence[str] = (),
                       at: datetime | None = None) -> PendingWrite:
        """Queue one message (as :meth:`Store.append_message`; result: its seq).
        ``settles``: ids of held messages (:meth:`hold_message`) this row now
        carries, deleted in the same transaction; ``at``: the time the row
        carries (default: now) — with ``settles``, when the person sent it,
        kept as it is (not moved after the batch's earlier rows)."""
        def values() -> dict[str, Any]:
            out = message_values(role=role, content=content, tool_calls=tool_calls, tool_call_id=tool_call_id,
                                 name=name)
            if settles:
                out["settles"] = list(settles)
            return out

        return self._submit("message", session_id, owner, values, at=at)

    def hold_message(self, session_id: str, *, owner: str, content: str) -> PendingWrite:
        """Queue a message held for the running turn of thread ``session_id``
        until a :meth:`append_message` ``settles`` it (``ongridd.store.pending``;
        result: its id, also ``values["id"]`` at once)."""
        def values() -> dict[str, Any]:
            check_text(content, "content")
            return {"id": new_id(), "content": clean_text(content)}

        return self._submit("hold_message", session_id, owner, values)

    def drop_held(self, session_id: str, ids: Sequence[str], *, owner: str) -> PendingWrite:
        """Queue the deletion of held messages ``ids`` that will never be stored (their turn was
        stopped before it ran: the person was told they were not sent; result: None)."""
        return self._submit("drop_held", session_id, owner, lambda: {"ids": list(ids)})

    def add_audit(self, *, session_id: str, owner: str, tool_name: str, arguments: str, result: str,
                  status: str, duration_ms: int, tool_call_id: str | None = None) -> PendingWrite:
        """Queue one audit row (as :meth:`Store.add_audit`; result: its id)."""
        return self._submit("audit", session_id, owner, lambda: audit_values(
            session_id=session_id, tool_name=tool_name, arguments=arguments, result=result, status=status,
            duration_ms=duration_ms, tool_call_id=tool_call_id))

    def add_usage(self, session_id: str, *, owner: str, model_calls: int = 1, prompt_tokens: int = 0,
                  completion_tokens: int = 0, cached_tokens: int = 0) -> PendingWrite:
        """Queue an increment of the session's usage counters (as
        :func:`ongridd.store.sessions.add_usage_in`; result: whether the row
        exists).  Counts below 0 are a ValueError (a failed write)."""

        def values() -> dict[str, Any]:
            out = {"model_calls": model_calls, "prompt_tokens": prompt_tokens,
                   "completion_tokens": completion_tokens, "cached_tokens": cached_tokens}
            for key, n in out.items():
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise ValueError(f"{key}: expected an integer >= 0, got {n!r}")
            return out

        return self._submit("usage", session_id, owner, values)

    def close_session(self, session_id: str, status: str, reason: str | None = None, *,
                      owner: str) -> PendingWrite:
        """Queue the close of a row (as :meth:`Store.close_session`; result: whether it closed it)."""

        def values() -> dict[str, Any]:
            check_choice(status, TERMINAL_STATUSES, "status")
            return {"status": status, "reason": clean_text(reason)}

        return self._submit("close_session", session_id, owner, values)

    def note_turn_error(self, session_id: str, error: str, *, owner: str) -> PendingWrite:
        """Queue the record that the thread ``session_id``'s turn ended with ``error`` (its
        ``error`` frame's ``"code: message"``), kept with the thread's last message seq as
        committed with it (:func:`ongridd.store.sessions.note_turn_error_in`; result: whether
        the row exists)."""
        return self._submit("turn_error", session_id, owner, lambda: {"error": clean_text(error) or ""})

    def _submit(self, kind: str, session_id: str, owner: str, build: Callable[[], dict[str, Any]], *,
                at: datetime | None = None) -> PendingWrite:
        self._submitted += 1
        write = PendingWrite(kind, session_id, owner, {}, number=self._submitted, urge=self._urge, at=at or utcnow())
        try:
            write.values = build()
        except ValueError as exc:  # a bad row is a failed write, reported like any other
            self._fail(write, exc)
            return write
        if self._stopped.is_set():
            self._fail(write, StoreError(f"{write.what}: the store writer has stopped (daemon shutdown)"))
            return write
        self._queue.append(write)
        self._last[session_id] = write
        self._last[owner] = write
        self._last_any = write
        if len(self._queue) == 1 or len(self._queue) >= self.max_batch:  # idle writer, or a full batch
            self._wakeup.set()
        return write

    def _urge(self, write: PendingWrite) -> None:
        """Someone waits for ``write``: end the group-commit hold up to it."""
        if write.number > self._urgent_upto:
            self._urgent_upto = write.number
            self._wakeup.set()

    def committed_seq(self, session_id: str) -> int | None:
        """The highest message seq this writer has committed for the session,
        or None when it does not know (nothing written by it yet, or its
        cache was dropped after a failure)."""
        return self._seqs.get(session_id)

    def note_empty(self, session_id: str) -> None:
        """The session has just been created with no message (its first
        message is seq 1 without reading the top seq)."""
        self._seqs.setdefault(session_id, 0)

    # ---- barriers and failures --------------------------------------------

    async def flush(self, key: str | None = None, *, timeout_s: float = math.inf) -> bool:
        """Wait until every write submitted before this call for ``key`` (a
        session id or an owner; None: all writes) is committed or finally
        failed.  Returns False when ``timeout_s`` passed first (the writes
        stay queued).  Cancellation: only the wait is cancelled."""
        write = self._last_any if key is None else self._last.get(key)
        if write is None:
            return True
        if timeout_s == math.inf:
            await write.settled()
            return True
        with trio.move_on_after(timeout_s):
            await write.settled()
            return True
        return False

    def take_failures(self, owner: str) -> list[str]:
        """The descriptions of ``owner``'s writes that finally failed since the
        last call (``"message of session <id>: <error>"``), oldest first."""
        return self._failures.pop(owner, [])

    # ---- the writer task ----------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Commit queued writes until :meth:`aclose` has drained the queue.

        Runs shielded: cancelling the surrounding nursery does not stop it
        (the turns being cancelled with it still hand over their last
        writes); only :meth:`aclose` does.  Raises RuntimeError when started
        twice.
        """
        if self._started:
            raise RuntimeError("this StoreWriter is already running")
        self._started = True
        _RUNNING.add(self)
        try:
            with trio.CancelScope(shield=True) as scope:
                self._scope = scope
                task_status.started()
                while True:
                    if not self._queue:
                        if self._closing:
                            break
                        self._wakeup = trio.Event()
                        await self._wakeup.wait()
                        continue
                    await self._hold()
                    self._inflight = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
                    await self._commit(self._inflight)
                    self._inflight = []
        finally:
            _RUNNING.discard(self)
            self._stopped.set()
            left = [w for w in self._inflight if not w.is_done] + list(self._queue)
            self._inflight, self._queue = [], deque()
            for write in left:
                self._fail(write, StoreError("the store writer stopped before this write was committed "
                                             "(shutdown drain timed out)"))

    async def _hold(self) -> None:
        """Group commit: while nobody waits for a queued write, the batch is
        not full and the writer is not closing, wait up to ``linger_s`` for
        more writes to join (a waiter or a full batch ends the wait)."""
        if self.linger_s <= 0 or not self._holding():  # most often someone already waits
            return
        with trio.move_on_after(self.linger_s):
            while self._holding():
                self._wakeup = trio.Event()
                await self._wakeup.wait()

    def _holding(self) -> bool:
        return (not self._closing and len(self._queue) < self.max_batch
                and self._urgent_upto < self._queue[0].number)

    async def aclose(self, timeout_s: float = DEFAULT_DRAIN_S) -> None:
        """Drain the queue, then stop :meth:`run` (idempotent).

        Waits up to ``timeout_s`` for the queue to empty; past it the writer
        is stopped and every write still queued is logged as an ERROR and
        failed.  Later submissions fail at once (logged).  Cancellation: the
        wait is cancelled; the writer keeps draining.
        """
        self._closing = True
        self._wakeup.set()
        if not self._started:
            self._stopped.set()
            while self._queue:
                self._fail(self._queue.popleft(), StoreError("the store writer never ran"))
            return
        with trio.move_on_after(timeout_s):
            await self._stopped.wait()
            return
        log.error("store_writer_drain_timeout", timeout_s=timeout_s, queued=len(self._queue))
        if self._scope is not None:
            self._scope.shield = False
            self._scope.cancel()
        await self._stopped.wait()

    # ---- committing ---------------------------------------------------------

    async def _commit(self, batch: list[PendingWrite]) -> None:
        try:
            results = await self._with_retries(batch, checked=False)
        except Exception as exc:  # noqa: BLE001 - every failure is retried one by one or reported to its writes
            self._seqs.clear()  # the cache may be wrong (another writer appended): read seqs again
            if is_transient(exc):
                # the database stayed unavailable for the whole retry window
                for write in batch:
                    self._fail(write, exc)
                return
            if len(batch) > 1:
                log.warning("store_batch_failed", writes=len(batch), error=self._describe(exc),
                            retry="one write per transaction")
            # one write per transaction with every check (NotFound names a missing session)
            for write in batch:
                try:
                    (result,) = await self._with_retries([write], checked=True)
                except Exception as one_exc:  # noqa: BLE001 - whatever failed it is reported to its owner
                    self._fail(write, one_exc)
                else:
                    self._succeed(write, result)
            return
        kinds: dict[str, int] = {}
        for write, result in zip(batch, results, strict=True):
            self._succeed(write, result, count=False)
            kinds[write.kind] = kinds.get(write.kind, 0) + 1
        for kind, n in kinds.items():  # one increment per kind and batch
            labelled(STORE_WRITES, kind, "committed").inc(n)

    async def _with_retries(self, batch: list[PendingWrite], *, checked: bool) -> list[Any]:
        """Apply ``batch`` in one transaction, retrying transient errors with
        backoff for up to ``retry_for_s``; raises the last error.  ``checked``:
        the one-write path with existence checks and seqs read from the
        database; otherwise the batched path (:func:`apply_batch_fast`)."""
        if not checked and self._inline_eligible(batch):
            inline = self._commit_inline(batch)
            if inline is not None:
                return inline
        start = self._clock()
        delay = BACKOFF_FIRST_S
        attempt = 0
        while True:
            attempt += 1
            try:
                if checked:
                    results = await self.store._db.run_raw(apply_batch, batch)
                else:
                    results, seqs = await self.store._db.run_raw(apply_batch_fast, batch, self._seqs)
                    self._note_seqs(seqs)
                self._since_checkpoint = 0  # that commit ran SQLite's automatic checkpoint
                self._count_transaction()
                return results
            except Exception as exc:
                if not is_transient(exc) or self._clock() - start + delay > self.retry_for_s:
                    raise
                log.warning("store_write_retry", writes=len(batch), attempt=attempt, delay_s=round(delay, 3),
                            error=self._describe(exc))
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)

    def _inline_eligible(self, batch: list[PendingWrite]) -> bool:
        if not 0 < len(batch) <= self.inline_max or self._queue:
            return False
        if self.store._db.wal_behind:  # background checkpoints fall behind: one commit with SQLite's own
            self.store._db.wal_behind = False
            return False
        return self._since_checkpoint < INLINE_CHECKPOINT_LAG_MAX

    def _commit_inline(self, batch: list[PendingWrite]) -> list[Any] | None:
        """Commit ``batch`` on this thread without waiting for anything
        (:meth:`Database.try_now`); its results, or None when that could not
        go ahead (nothing was committed: the caller goes through a thread).
        Other errors are raised as from a thread."""
        done = self.store._db.try_now(_apply_batch_nowait, batch, self._seqs)
        if isinstance(done, NotNow):
            return None
        results, seqs = done
        self._note_seqs(seqs)
        self._count_transaction()
        self.inline_commits += 1
        self._since_checkpoint += 1
        if self._since_checkpoint >= INLINE_CHECKPOINT_EVERY and self.store._db.checkpoint_soon():
            self._since_checkpoint = 0
        return results

    def _note_seqs(self, seqs: dict[str, int]) -> None:
        """Keep the last seqs a batch committed (the cache is dropped past SEQ_CACHE_MAX)."""
        if len(self._seqs) + len(seqs) > SEQ_CACHE_MAX:
            self._seqs.clear()
        self._seqs.update(seqs)

    def _count_transaction(self) -> None:
        self.transactions += 1
        STORE_TRANSACTIONS.inc()

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, OngridError | ValueError) or not isinstance(exc, Exception):
            return str(exc)
        return describe_error(exc, self.store._db.url)

    def _succeed(self, write: PendingWrite, result: Any, *, count: bool = True) -> None:
        write.result = result
        self.committed += 1
        if count:
            labelled(STORE_WRITES, write.kind, "committed").inc()
        self._settle(write)

    def _fail(self, write: PendingWrite, exc: BaseException) -> None:
        if not isinstance(exc, OngridError | ValueError):
            # a raw database error: keep the type callers catch, with a password-free message
            exc = StoreError(f"database {self.store.url}: {write.what} failed: {self._describe(exc)}")
        write.error = exc
        self.failed += 1
        labelled(STORE_WRITES, write.kind, "failed").inc()
        log.error("store_write_failed", what=write.what, session_id=write.session_id, owner=write.owner,
                  error=str(exc))
        kept = self._failures.setdefault(write.owner, [])
        if len(kept) < MAX_FAILURES_KEPT:
            kept.append(f"{write.what} of session {write.session_id}: {exc}")
        self._settle(write)

    def _settle(self, write: PendingWrite) -> None:
        write._set_done()
        for key in (write.session_id, write.owner):
            if self._last.get(key) is write:
                del self._last[key]
        if self._last_any is write:
            self._last_any = None


# ---- the blocking side (one worker thread, one transaction per call) -------


def _row_time(write: PendingWrite, last: datetime | None) -> tuple[datetime, datetime | None]:
    """``(the time write's row carries, the batch's last time after it)``: its submission time,
    moved just after the batch's previous row when not later (rows ordered by time keep
    submission order) — except a message carrying held messages, which keeps the time the
    person sent it."""
    now = write.at or utcnow()
    if write.kind == "message" and write.values.get("settles"):
        return now, last
    if last is not None and now <= last:
        now = last + timedelta(microseconds=1)
    return now, now


def apply_batch(engine: Engine, batch: list[PendingWrite]) -> list[Any]:
    """Apply every write of ``batch`` in one transaction, in order; their
    results.  Raises the database's error (nothing of the batch is then
    committed).  A row's time is its write's submission time (``at``), made
    strictly increasing within the batch, so rows ordered by time keep
    submission order."""
    results: list[Any] = []
    seqs: dict[str, int] = {}
    last: datetime | None = None
    with write_tx(engine) as conn:
        for write in batch:
            now, last = _row_time(write, last)
            kind, sid, values = write.kind, write.session_id, write.values
            if kind == "message":
                results.append(messages.append_message_in(conn, sid, values, now, seqs))
                pending.settle_many(conn, values.get("settles", ()))
            elif kind == "hold_message":
                pending.hold_many(conn, [{"id": values["id"], "session_id": sid, "content": values["content"],
                                          "created_at": now}])
                results.append(values["id"])
            elif kind == "drop_held":
                pending.settle_many(conn, values["ids"])
                results.append(None)
            elif kind == "audit":
                results.append(audit.add_audit_in(conn, values, now))
            elif kind == "close_session":
                results.append(sessions.close_session_in(conn, sid, values["status"], values["reason"], now))
            elif kind == "usage":
                results.append(sessions.add_usage_in(conn, sid, values))
            elif kind == "mark_running":
                results.append(sessions.mark_running_in(conn, sid, now))
            elif kind == "turn_error":
                results.append(sessions.note_turn_error_in(conn, sid, values["error"]))
            elif kind == "create_session":
                results.append(sessions.create_session_in(conn, now=now, **values))
            else:
                raise ValueError(f"unknown write kind {kind!r}; expected one of {', '.join(KINDS)}")
    return results


# Statements built once and compiled once per dialect (ongridd/store/fastsql.py):
# executed with bind parameters on the DBAPI cursor (a list of rows is one
# executemany call), no existence checks (the foreign keys refuse a row of an
# unknown session; the checked path then names it) and no read-back (the new
# session row is known from its values).
_MESSAGE_KEYS = ("session_id", "seq", "role", "content", "tool_calls", "tool_call_id", "name", "created_at")
_AUDIT_KEYS = ("id", "session_id", "tool_name", "arguments", "result", "status", "duration_ms", "created_at",
               "tool_call_id")
_SESSION_KEYS = ("id", "agent_id", "parent_session_id", "user_id", "thread_id", "description", "status",
                 "created_at", "started_at", "closed_at", "close_reason", "turn_seq")
_INSERT_MESSAGE = Prepared(sa.insert(chat_messages), _MESSAGE_KEYS)
_INSERT_AUDIT = Prepared(sa.insert(audit_logs), _AUDIT_KEYS)
_INSERT_SESSION = Prepared(sa.insert(chat_sessions), _SESSION_KEYS)
_ADD_USAGE = Prepared(sessions.ADD_USAGE)
_NOTE_TURN_ERROR = Prepared(sessions.NOTE_TURN_ERROR)
_MARK_RUNNING = Prepared(sa.update(chat_sessions)
                         .where(chat_sessions.c.id == sa.bindparam("sid"), chat_sessions.c.status == "pending")
                         .values(status="running", started_at=sa.bindparam("now"))
                         .returning(*chat_sessions.c))
_CLOSE = Prepared(sa.update(chat_sessions)
                  .where(chat_sessions.c.id == sa.bindparam("sid"), chat_sessions.c.closed_at.is_(None),
                         *(chat_sessions.c.status != s for s in TERMINAL_STATUSES))
                  .values(status=sa.bindparam("new_status"), closed_at=sa.bindparam("now"),
                          close_reason=sa.bindparam("reason")))
# PostgreSQL: the session rows a batch appends to, locked (ids sorted: rows are locked in key
# order), and the top seq of sessions this writer has not written yet; SQLite: one session at a time
_ID_ARRAY = sa.ARRAY(sa.String)  # PostgreSQL only (the generic type: no dialect import on SQLite)
_LOCK_SESSIONS = Prepared(sa.select(chat_sessions.c.id)
                          .where(chat_sessions.c.id == sa.any_(sa.bindparam("ids", type_=_ID_ARRAY)))
                          .with_for_update())
_MAX_SEQS = Prepared(sa.select(chat_messages.c.session_id, sa.func.max(chat_messages.c.seq).label("top"))
                     .where(chat_messages.c.session_id == sa.any_(sa.bindparam("ids", type_=_ID_ARRAY)))
                     .group_by(chat_messages.c.session_id))
_MAX_SEQ = Prepared(sa.select(sa.func.max(chat_messages.c.seq).label("top"))
                    .where(chat_messages.c.session_id == sa.bindparam("sid")))
_SESSION_EXISTS = Prepared(sa.select(chat_sessions.c.id).where(chat_sessions.c.id == sa.bindparam("sid")))


def apply_batch_fast(engine: Engine, batch: list[PendingWrite],
                     known_seqs: dict[str, int], *, nowait: bool = False) -> tuple[list[Any], dict[str, int]]:
    """Apply ``batch`` in one transaction with few statements: new sessions,
    then held messages, then messages, then audit rows as one multi-row
    insert each (the held messages the messages settle deleted after them),
    then the status changes in submission order; ``(results, new last seqs)``.

    A worker marked running in the batch that creates it is inserted
    ``running`` (the update could only have succeeded: nothing else sees
    the row before the commit).

    ``known_seqs``: the last committed seq of sessions this writer appended
    to (read only; the top seq is read, under the session row's lock on
    PostgreSQL, for the others).  Raises the database's error — a foreign
    key or unique violation included — and nothing of the batch is then
    committed (the caller retries it one checked write at a time).
    ``nowait``: as :func:`ongridd.store.fastsql.raw_write_tx` (SQLite, on the
    event loop's thread: "database is locked" at once instead of waiting)."""
    results: list[Any] = [None] * len(batch)
    session_rows: list[dict[str, Any]] = []
    message_rows: list[dict[str, Any]] = []
    audit_rows: list[dict[str, Any]] = []
    held_rows: list[dict[str, Any]] = []
    settled: list[str] = []
    updates: list[tuple[int, PendingWrite, datetime]] = []
    message_writes: list[tuple[int, PendingWrite, datetime]] = []
    created: dict[str, dict[str, Any]] = {}  # session id → its row (as inserted) while still pending
    closed: set[str] = set()  # sessions created in this batch and closed after
    usage: dict[str, list[int]] = {}
    last: datetime | None = None
    for i, write in enumerate(batch):
        now, last = _row_time(write, last)
        kind, values = write.kind, write.values
        if kind == "message":
            message_writes.append((i, write, now))
            settled.extend(values.get("settles", ()))
        elif kind == "hold_message":
            held_rows.append({"id": values["id"], "session_id": write.session_id, "content": values["content"],
                              "created_at": now})
            results[i] = values["id"]
        elif kind == "drop_held":
            settled.extend(values["ids"])
        elif kind == "audit":
            audit_id = new_id()
            audit_rows.append({**values, "id": audit_id, "created_at": now})
            results[i] = audit_id
        elif kind == "create_session":
            sid = values["session_id"]
            status = values["status"]
            row = {k: v for k, v in values.items() if k != "session_id"}
            row.update(id=sid, created_at=now, started_at=now if status == "running" else None,
                       closed_at=now if status in TERMINAL_STATUSES else None, close_reason=None)
            session_rows.append(row)
            created[sid] = row
            results[i] = _session_result(row)
        elif kind == "mark_running" and write.session_id in created and write.session_id not in closed:
            row = created[write.session_id]
            if row["status"] == "pending":  # the update's condition, decided here
                row.update(status="running", started_at=now)
                results[i] = _session_result(row)
        elif kind == "usage":  # increments commute: one update per session and batch
            usage.setdefault(write.session_id, []).append(i)
        elif kind in ("mark_running", "close_session", "turn_error"):
            if kind == "close_session" and write.session_id in created:
                closed.add(write.session_id)
            updates.append((i, write, now))
        else:
            raise ValueError(f"unknown write kind {kind!r}; expected one of {', '.join(KINDS)}")
    seqs: dict[str, int] = {}
    with raw_write_tx(engine, nowait=nowait) as conn:
        postgres = conn.dialect.name == "postgresql"
        if session_rows:
            _INSERT_SESSION.executemany(conn, session_rows)
        pending.hold_many(conn, held_rows)  # before the messages that settle them (a batch may hold both)
        if message_writes:
            targets = {w.session_id for _i, w, _now in message_writes}
            unknown = sorted(sid for sid in targets if sid not in known_seqs and sid not in created)
            if postgres:  # SQLite: BEGIN IMMEDIATE already serialises writers
                locked = sorted(targets.difference(created))
                if locked:
                    _LOCK_SESSIONS.fetchall(conn, {"ids": locked})
            for sid in created:
                seqs[sid] = 0
            if unknown:
                for sid in unknown:
                    seqs[sid] = 0
                if postgres:
                    for row in _MAX_SEQS.fetchall(conn, {"ids": unknown}):
                        seqs[row["session_id"]] = int(row["top"] or 0)
                else:
                    for sid in unknown:
                        (row,) = _MAX_SEQ.fetchall(conn, {"sid": sid})
                        seqs[sid] = int(row["top"] or 0)
            for i, write, now in message_writes:
                sid = write.session_id
                seq = seqs.get(sid, known_seqs.get(sid, 0)) + 1
                seqs[sid] = seq
                v = write.values
                message_rows.append({"session_id": sid, "seq": seq, "role": v["role"], "content": v.get("content"),
                                     "tool_calls": v.get("tool_calls"), "tool_call_id": v.get("tool_call_id"),
                                     "name": v.get("name"), "created_at": now})
                results[i] = seq
            _INSERT_MESSAGE.executemany(conn, message_rows)
        pending.settle_many(conn, settled)
        if audit_rows:
            _INSERT_AUDIT.executemany(conn, audit_rows)
        for i, write, now in updates:
            if write.kind == "mark_running":
                running = _MARK_RUNNING.fetchall(conn, {"sid": write.session_id, "now": now})
                results[i] = sessions.session_dict(running[0]) if running else None
            elif write.kind == "turn_error":  # after the messages: the seq it keeps is the batch's last
                results[i] = _NOTE_TURN_ERROR.execute(conn, {"sid": write.session_id, "error": write.values["error"]}) == 1
            else:
                changed = _CLOSE.execute(conn, {"sid": write.session_id, "now": now,
                                                "new_status": write.values["status"],
                                                "reason": write.values["reason"]})
                results[i] = changed == 1
        if usage:  # one executemany for every session's counters
            totals = {sid: {k: sum(int(batch[i].values.get(k, 0)) for i in indexes) for k in sessions.USAGE_KEYS}
                      for sid, indexes in usage.items()}
            changed = _ADD_USAGE.executemany(conn, [sessions.usage_params(sid, t) for sid, t in totals.items()])
            all_found = changed == len(totals)
            for sid, indexes in usage.items():
                # a session row missing (rare): it changed nothing, so asking again per session is safe
                found = True if all_found else bool(_SESSION_EXISTS.fetchall(conn, {"sid": sid}))
                for i in indexes:
                    results[i] = found
    return results, seqs


def _apply_batch_nowait(engine: Engine, batch: list[PendingWrite],
                        known_seqs: dict[str, int]) -> tuple[list[Any], dict[str, int]]:
    """:func:`apply_batch_fast` for the event loop's thread (never waits for the lock)."""
    return apply_batch_fast(engine, batch, known_seqs, nowait=True)


def _session_result(row: dict[str, Any]) -> dict[str, Any]:
    """A session write's result (the row as :meth:`Store.get_session` shows it) from its inserted values."""
    return {**row, **sessions.USAGE_ZERO, **sessions.NOT_WRITTEN, "created_at": iso(row["created_at"]),
            "started_at": iso(row["started_at"]),
            "closed_at": iso(row["closed_at"])}


@contextlib.asynccontextmanager
async def running_writer(store: Store, **kwargs: Any) -> AsyncIterator[StoreWriter]:
    """``async with running_writer(store) as writer:`` — a writer running in
    its own nursery for the block, drained (:meth:`StoreWriter.aclose`) on
    the way out, also when the block raises or is cancelled."""
    writer = StoreWriter(store, **kwargs)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        try:
            yield writer
        finally:
            with trio.CancelScope(shield=True):
                await writer.aclose()


__all__ = ["PendingWrite", "StoreWriter", "apply_batch", "apply_batch_fast", "running_writer"]
