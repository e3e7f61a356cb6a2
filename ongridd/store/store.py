"""The Store: the runtime's async persistence API (docs/architecture.md §11, §12).

Every method is async and runs its database work in a worker thread through
``trio.to_thread.run_sync`` (the sync SQLAlchemy engine never blocks the event loop).
Results are plain dicts whose times are ISO 8601 UTC strings
(``2026-01-02T03:04:05.000006Z``) or None.

Text: NUL characters in free text (message content, audit arguments and
results, descriptions, reasons) are stored as U+FFFD on every backend
(PostgreSQL text cannot hold NUL).

Errors: :class:`ongridd.errors.StoreError` when the database fails
(unreachable, locked, constraint refused), with the password-redacted URL
in the message; :class:`ongridd.errors.NotFound` when a write names a
session or proposal that does not exist; ValueError naming the argument for
bad input (checked before the database is touched).

Cancellation: a call still waiting for a thread slot is cancelled at once;
a call whose transaction already started runs to its commit or rollback and
the cancellation is delivered when it returns.  The runtime does not call
the write methods from a turn: it hands writes to a
:class:`ongridd.store.writer.StoreWriter`, which keeps them until they are
committed whatever happens to the task that submitted them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import trio
from sqlalchemy.engine import URL

from ongridd.errors import StoreError
from ongridd.logs import get_logger
from ongridd.store import audit, messages, recovery, sessions, summaries, threads
from ongridd.store import migrate as schema_migrate
from ongridd.store.engine import (
    DEFAULT_BUSY_TIMEOUT_S,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_POOL_SIZE,
    Database,
    create_engine,
    normalize_url,
    shown_url,
)
from ongridd.store.channels import ChannelStore
from ongridd.store.incidents import PluginStoreImpl
from ongridd.store.recovery import RecoveryReport
from ongridd.store.rows import (
    ACTIVE_STATUSES,
    COORDINATOR_STATUS,
    DECISIONS,
    SESSION_STATUSES,
    TERMINAL_STATUSES,
    check_choice,
    check_text,
    clean_text,
)
from ongridd.tools.spec import AUDIT_STATUSES, BLAST_RADII

log = get_logger(__name__)


def _check_state_dir(url: URL) -> tuple[Path, bool]:
    """For a SQLite URL: the database file and whether it existed.

    The state dir (the file's folder) must exist and be writable; it is not
    created here (systemd's StateDirectory or the operator makes it).
    """
    db = Path(url.database or "")
    if not db.is_absolute():
        db = Path.cwd() / db
    state_dir = db.parent
    if not state_dir.exists():
        raise StoreError(f"state dir {state_dir} does not exist; create it (writable by the daemon) or pass --state-dir")
    if not state_dir.is_dir():
        raise StoreError(f"state dir {state_dir} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".ongrid-probe-", dir=state_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StoreError(f"state dir {state_dir} is not writable: {exc.strerror or exc}") from None
    existed = db.exists()
    if existed:
        if db.is_dir():
            raise StoreError(f"database file {db} is a directory")
        try:
            with open(db, "r+b"):
                pass
        except OSError as exc:
            raise StoreError(f"database file {db} is not writable: {exc.strerror or exc}") from None
    return db, existed


def _remove_new_db(db: Path) -> None:
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        with contextlib.suppress(OSError):
            path.unlink()


class Store:
    """Sessions, messages, audit rows, proposals, incidents and change events.

    Build one with :meth:`open` (or :func:`open_store`); close it with
    :meth:`aclose`.  ``plugin_store`` is the narrow API handed to plugins.
    Safe to use from many Trio tasks at once.
    """

    def __init__(self, db: Database):
        self._db = db
        self.plugin_store = PluginStoreImpl(db)
        self.channel_store = ChannelStore(db)

    @property
    def url(self) -> str:
        """The database URL with its password replaced by ``***``."""
        return shown_url(self._db.url)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.engine.dialect.name

    # ---- lifetime -------------------------------------------------------

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool = True,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> Store:
        """Connect, bring the schema to the newest revision, and return the Store.

        ``url``: ``sqlite:///<abs path>/ongrid.db`` (the folder — the state
        dir — must exist and be writable) or ``postgresql://…`` (mapped to
        psycopg 3).  ``migrate=False`` only checks the schema is current.
        ``busy_timeout_s``: SQLite lock wait; ``connect_timeout_s``:
        PostgreSQL connect timeout.  Raises StoreError (unsupported URL,
        state dir missing or not writable, database unreachable, locked, not
        a database, schema too new).  A SQLite file this call created is
        removed again when opening fails, so nothing is left half-created.
        Cancellation: the engine is disposed and the cancellation propagates.
        """
        parsed = normalize_url(url)
        if pool_size < 1:
            raise ValueError(f"pool_size: expected a positive integer, got {pool_size!r}")
        db_file: Path | None = None
        existed = True
        if parsed.drivername.startswith("sqlite"):
            db_file, existed = await trio.to_thread.run_sync(_check_state_dir, parsed)
            parsed = parsed.set(database=str(db_file))
        engine = create_engine(
            parsed, busy_timeout_s=busy_timeout_s, connect_timeout_s=connect_timeout_s, pool_size=pool_size
        )
        db = Database(engine, parsed, pool_size)
        ok = False
        try:
            if migrate:
                before, after = await db.run("schema migration", schema_migrate.upgrade_to_head)
                if before != after:
                    log.info("schema_migrated", url=db_file or shown_url(parsed), before=before, after=after)
            else:
                await db.run_read("schema check", schema_migrate.check_at_head)
            ok = True
        finally:
            if not ok:
                with trio.move_on_after(10, shield=True):
                    await db.aclose()
                if db_file is not None and not existed:
                    _remove_new_db(db_file)
        log.info("store_opened", url=shown_url(parsed), dialect=engine.dialect.name)
        return cls(db)

    async def aclose(self) -> None:
        """Close every pooled connection (idempotent).  Later calls raise StoreError."""
        await self._db.aclose()

    # ---- sessions -------------------------------------------------------

    async def create_session(
        self,
        *,
        agent_id: str,
        user_id: str,
        parent_session_id: str | None = None,
        thread_id: str | None = None,
        description: str | None = None,
        status: str,
        turn_seq: int | None = None,
    ) -> dict[str, Any]:
        """Insert a session row and return it.

        ``status``: ``open`` for a coordinator (no parent); ``pending`` (the
        usual start), ``running`` (sets ``started_at``) or a terminal status
        (sets ``closed_at``) for a worker/reviewer.  The dict has keys ``id,
        agent_id, parent_session_id, user_id, thread_id, description, status,
        created_at, started_at, closed_at, close_reason, turn_seq`` and the
        usage counters.  ``turn_seq``: for a worker or reviewer, the seq of the
        coordinator's user message whose turn started it (None otherwise).  NotFound when the
        parent does not exist; StoreError when a coordinator row for
        (user, thread) already exists (use :meth:`get_or_create_coordinator`).
        """
        values = session_values(agent_id=agent_id, user_id=user_id, parent_session_id=parent_session_id,
                                thread_id=thread_id, description=description, status=status, turn_seq=turn_seq)
        return await self._db.run("create session", _kw(sessions.create_session), values)

    async def get_or_create_coordinator(self, user_id: str, thread_id: str) -> tuple[dict[str, Any], bool]:
        """The coordinator row of (user, thread) and whether this call created it.

        One row per (user, thread): agent ``default``, status ``open``.
        Race-safe: concurrent callers get the same row, exactly one sees True.
        The thread name is stored (and looked up) with every held secret
        redacted, as every free-text column is (:func:`clean_text`).
        """
        check_text(user_id, "user_id")
        check_text(thread_id, "thread_id")
        return await self._db.run_write_soon("get or create coordinator", sessions.get_or_create_coordinator,
                                             user_id, clean_text(thread_id))

    async def delete_empty_coordinator(self, session_id: str) -> bool:
        """Delete a coordinator (thread) row that is still empty — no
        message, child, audit row, turn origin or summary — checked and
        deleted in one transaction.  True when it was deleted; False when
        it holds something (or is gone, or is not a coordinator)."""
        return await self._db.run("delete empty coordinator", sessions.delete_empty_coordinator, session_id)

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session dict (see :meth:`create_session`) or None."""
        return await self._db.run_read("get session", sessions.get_session, session_id)

    async def mark_running(self, session_id: str) -> dict[str, Any] | None:
        """``pending → running`` with ``started_at``; the updated row, or None when
        the row does not exist or is not ``pending`` (nothing changes then)."""
        return await self._db.run("mark session running", sessions.mark_running, session_id)

    async def close_session(self, session_id: str, status: str, reason: str | None = None) -> bool:
        """Close a row: ``status`` (completed|failed|killed), ``closed_at``, ``close_reason``.

        Only a row not closed yet changes; returns whether this call closed
        it (False: already closed, or no such row).  Idempotent and race-safe.
        """
        check_choice(status, TERMINAL_STATUSES, "status")
        return await self._db.run("close session", sessions.close_session, session_id, status, clean_text(reason))

    async def list_children(self, session_id: str) -> list[dict[str, Any]]:
        """Direct children (workers of a coordinator, the reviewer of a worker), oldest first."""
        return await self._db.run_read("list child sessions", sessions.list_children, session_id)

    async def session_tree(self, session_id: str) -> dict[str, Any] | None:
        """The nested tree from ``session_id``: ``{id, agent_id, user_id,
        parent_session_id, status, description, created_at, started_at,
        closed_at, close_reason, tokens: {prompt, completion, cached,
        model_calls}, children: [...]}``, children oldest first.
        None when the session does not exist.
        """
        return await self._db.run_read("read session tree", sessions.session_tree, session_id)

    async def export_tree(self, session_id: str) -> dict[str, Any] | None:
        """The session, its whole tree, messages, audit rows and proposals as
        one document (see :mod:`ongridd.store.export`); None when the session
        does not exist."""
        from ongridd.store.export import export_tree

        return await self._db.run_read("export session tree", export_tree, session_id)

    async def close_open_workers(self, status: str, reason: str) -> int:
        """Close every pending/running worker and reviewer row (daemon shutdown:
        ``killed``, "daemon shutdown"); returns how many were closed."""
        check_choice(status, TERMINAL_STATUSES, "status")
        return await self._db.run("close open workers", sessions.close_open_workers, status, clean_text(reason))

    async def count_sessions_by_status(self) -> dict[str, int]:
        """``{status: number of rows}`` for the statuses present (for metrics)."""
        return await self._db.run_read("count sessions", sessions.count_by_status)

    # ---- messages -------------------------------------------------------

    async def append_message(
        self,
        session_id: str,
        *,
        role: str,
        content: str | None,
        tool_calls: Iterable[Any] | None = None,
        tool_call_id: str | None = None,
        name: str | None = None,
    ) -> int:
        """Append one message to a session's history; returns its ``seq``.

        ``role``: system|user|assistant|tool.  ``tool_calls`` (assistant
        only): ``[{id, name, arguments}]`` (mappings or ``ToolCall``-like
        objects; ``arguments`` the raw text).  ``tool_call_id``: required on
        ``tool`` messages; ``name``: the tool's name there.  Seqs are
        assigned atomically: 1, 2, 3, … per session, no gaps under
        concurrency.  NotFound when the session does not exist.
        """
        message = message_values(role=role, content=content, tool_calls=tool_calls, tool_call_id=tool_call_id,
                                 name=name)
        return await self._db.run("append message", messages.append_message, session_id, message)

    async def load_messages(self, session_id: str) -> list[dict[str, Any]]:
        """The history in seq order: ``[{seq, role, content, tool_calls, tool_call_id, name, created_at}]``."""
        return await self._db.run_read("load messages", messages.load_messages, session_id)

    async def load_messages_after(self, session_id: str, after_seq: int) -> list[dict[str, Any]]:
        """The messages with ``seq > after_seq``, as :meth:`load_messages`."""
        return await self._db.run_read("load messages", summaries.messages_after, session_id, after_seq)

    # ---- thread summaries (ongridd/store/summaries.py) ----------------------

    async def add_summary(self, session_id: str, *, through_seq: int, content: str, source: str,
                          summarizer_session_id: str | None = None) -> dict[str, Any]:
        """Store a summary covering ``seq <= through_seq``; returns the row."""
        return await self._db.run("add summary", summaries.add_summary, session_id, through_seq, content, source,
                                  summarizer_session_id)

    async def latest_summary(self, session_id: str) -> dict[str, Any] | None:
        """The thread's newest summary row (highest ``through_seq``) or None."""
        return await self._db.run_read("latest summary", summaries.latest_summary, session_id)

    async def list_summaries(self, session_id: str, *, after_seq: int, through_seq: int | None) -> list[dict[str, Any]]:
        """Summary rows with ``after_seq < through_seq <= through_seq``, in order."""
        return await self._db.run_read("list summaries", summaries.summaries_between, session_id, after_seq,
                                       through_seq)

    # ---- audit ------------------------------------------------------------

    async def add_audit(
        self, *, session_id: str, tool_name: str, arguments: str, result: str, status: str, duration_ms: int,
        tool_call_id: str | None = None,
    ) -> str:
        """Record one tool call; returns the audit row id.

        ``arguments``: as the model sent them; ``result``: already truncated
        by the caller; ``status``: one of ``AUDIT_STATUSES``;
        ``duration_ms``: wall time (int ≥ 0); ``tool_call_id``: the model's
        call id (None when unknown).  NotFound for an unknown session.
        """
        values = audit_values(session_id=session_id, tool_name=tool_name, arguments=arguments, result=result,
                              status=status, duration_ms=duration_ms, tool_call_id=tool_call_id)
        return await self._db.run("add audit row", audit.add_audit, values)

    async def list_audit(self, session_id: str, *, include_children: bool = False) -> list[dict[str, Any]]:
        """Audit rows oldest first: ``[{id, session_id, agent_id, tool_name,
        arguments, result, status, duration_ms, created_at}]``.  With
        ``include_children``: the rows of the whole subtree (workers, reviewers)."""
        return await self._db.run_read("list audit rows", audit.list_audit, session_id, include_children)

    # ---- console reads (ongridd.store.threads) -----------------------------

    async def list_threads(self, user_id: str, *, limit: int, before: datetime | None = None,
                           before_id: str | None = None) -> list[dict[str, Any]]:
        """A user's coordinator threads, newest activity first (see :func:`threads.list_threads`)."""
        return await self._db.run_read("list threads", threads.list_threads, user_id, limit, before, before_id)

    async def list_messages(self, session_id: str, *, after_seq: int, limit: int) -> list[dict[str, Any]]:
        """A page of a session's messages (see :func:`threads.list_messages`)."""
        return await self._db.run_read("list messages", threads.list_messages, session_id, after_seq, limit)

    async def list_origins(self, session_id: str) -> list[dict[str, Any]]:
        """Where the session's bridged turns came from, oldest first (:class:`ChannelStore`)."""
        return await self.channel_store.list_origins(session_id)

    async def list_audit_items(self, session_id: str, *, include_children: bool, limit: int,
                               offset: int = 0) -> list[dict[str, Any]]:
        """Audit rows with their proposals (see :func:`threads.list_audit_items`)."""
        return await self._db.run_read("list audit items", threads.list_audit_items, session_id,
                                       include_children, limit, offset)

    # ---- proposals --------------------------------------------------------

    async def create_proposal(
        self, *, session_id: str, action: str, target: str, reason: str, blast_radius: str, operator: str,
        tool_call_id: str | None = None,
    ) -> str:
        """Record a review-gate proposal (undecided); returns its id.  ``tool_call_id``:
        the gated call's id (links the proposal to that call's audit row)."""
        for value, field in ((action, "action"), (target, "target"), (reason, "reason"), (operator, "operator")):
            check_text(value, field)
        check_choice(blast_radius, BLAST_RADII, "blast_radius")
        values = {
            "session_id": session_id,
            "action": clean_text(action),
            "target": clean_text(target),
            "reason": clean_text(reason),
            "blast_radius": blast_radius,
            "operator": operator,
            "tool_call_id": check_call_id(tool_call_id),
        }
        return await self._db.run("create proposal", audit.create_proposal, values)

    async def record_change_event(self, *, kind: str, subject: str, actor: str,
                                  detail: Mapping[str, Any]) -> dict[str, Any]:
        """Record one of Ongrid's own changes (``recorded_by`` None, occurred now); the row.
        See :meth:`PluginStoreImpl.record_change_event`."""
        return await self.plugin_store.record_change_event(kind=kind, subject=subject, actor=actor, detail=detail)

    async def decide_proposal(
        self, proposal_id: str, *, decision: str, decision_reason: str | None, reviewer_session_id: str | None
    ) -> None:
        """Record the gate's decision (approve|reject) and ``decided_at``.

        NotFound for an unknown proposal; StoreError when it was already
        decided (a decision is final).
        """
        check_choice(decision, DECISIONS, "decision")
        await self._db.run(
            "decide proposal",
            audit.decide_proposal,
            proposal_id,
            decision,
            clean_text(decision_reason),
            reviewer_session_id,
        )

    async def get_proposal(self, proposal_id: str) -> dict[str, Any] | None:
        """``{id, session_id, action, target, reason, blast_radius, operator,
        decision, decision_reason, reviewer_session_id, created_at, decided_at}`` or None."""
        return await self._db.run_read("get proposal", audit.get_proposal, proposal_id)

    # ---- recovery ---------------------------------------------------------

    async def recovery_sweep(self, now: datetime | None = None, *, full_scan: bool = False) -> RecoveryReport:
        """The startup sweep of docs/architecture.md §4 (see :mod:`ongridd.store.recovery`).

        Run it once before the server accepts clients.  ``now``: the time
        written as ``closed_at`` (default: the current time).
        """
        return await self._db.run("recovery sweep", recovery.sweep, now, full_scan)


def session_values(*, agent_id: str, user_id: str, parent_session_id: str | None, thread_id: str | None,
                   description: str | None, status: str, turn_seq: int | None = None) -> dict[str, Any]:
    """The checked column values of a new session row (see :meth:`Store.create_session`);
    ValueError naming the argument."""
    check_text(agent_id, "agent_id")
    if turn_seq is not None and (isinstance(turn_seq, bool) or not isinstance(turn_seq, int) or turn_seq < 1):
        raise ValueError(f"turn_seq: expected a message seq (an integer >= 1) or None, got {turn_seq!r}")
    if turn_seq is not None and parent_session_id is None:
        raise ValueError("turn_seq: only a worker or reviewer row (with a parent) belongs to a turn")
    check_text(user_id, "user_id")
    check_choice(status, SESSION_STATUSES, "status")
    if parent_session_id is None and status != COORDINATOR_STATUS:
        raise ValueError(f"status: a coordinator session (no parent) must be 'open', got {status!r}")
    if parent_session_id is not None and status == COORDINATOR_STATUS:
        raise ValueError("status: 'open' is for coordinator sessions; a worker starts 'pending'")
    return {
        "agent_id": agent_id,
        "user_id": user_id,
        "parent_session_id": parent_session_id,
        "thread_id": clean_text(thread_id),
        "description": clean_text(description),
        "status": status,
        "turn_seq": turn_seq,
    }


def message_values(*, role: str, content: str | None, tool_calls: Iterable[Any] | None = None,
                   tool_call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    """The checked values of a message row (see :meth:`Store.append_message`); ValueError naming the field."""
    calls = messages.normalize_tool_calls(tool_calls)
    messages.check_message(role, content, calls, tool_call_id, name)
    return {
        "role": role,
        "content": clean_text(content),
        "tool_calls": calls,
        "tool_call_id": tool_call_id,
        "name": name,
    }


def check_call_id(tool_call_id: str | None) -> str | None:
    """A model's tool-call id as stored (None stays None; cut to MAX_CALL_ID_CHARS);
    ValueError when it is not a string."""
    if tool_call_id is None:
        return None
    if not isinstance(tool_call_id, str):
        raise ValueError(f"tool_call_id: expected a string or None, got {type(tool_call_id).__name__}")
    return clean_text(tool_call_id[:MAX_CALL_ID_CHARS]) or None


MAX_CALL_ID_CHARS = 256


def audit_values(*, session_id: str, tool_name: str, arguments: str, result: str, status: str,
                 duration_ms: int, tool_call_id: str | None = None) -> dict[str, Any]:
    """The checked values of an audit row (see :meth:`Store.add_audit`); ValueError naming the field."""
    check_text(tool_name, "tool_name")
    check_choice(status, AUDIT_STATUSES, "status")
    if not isinstance(arguments, str):
        raise ValueError(f"arguments: expected the raw text, got {type(arguments).__name__}")
    if not isinstance(result, str):
        raise ValueError(f"result: expected text, got {type(result).__name__}")
    if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 0:
        raise ValueError(f"duration_ms: expected an integer ≥ 0, got {duration_ms!r}")
    return {
        "session_id": session_id,
        "tool_name": tool_name,
        "arguments": clean_text(arguments),
        "result": clean_text(result),
        "status": status,
        "duration_ms": duration_ms,
        "tool_call_id": check_call_id(tool_call_id),
    }


def _kw(fn: Any) -> Any:
    """Adapt ``fn(engine, **kw)`` to the positional ``Database.run`` call."""

    def call(engine: Any, kwargs: dict[str, Any]) -> Any:
        return fn(engine, **kwargs)

    return call


@contextlib.asynccontextmanager
async def open_store(url: str, **kwargs: Any) -> AsyncIterator[Store]:
    """``async with open_store(url) as store:`` — :meth:`Store.open` then a
    shielded, bounded :meth:`Store.aclose` on the way out (also on cancellation)."""
    store = await Store.open(url, **kwargs)
    try:
        yield store
    finally:
        with trio.move_on_after(10, shield=True):
            await store.aclose()


__all__ = ["ACTIVE_STATUSES", "RecoveryReport", "Store", "open_store"]
