"""Engine construction and the thread bridge.

* SQLite (``sqlite:///<path>``): WAL, foreign keys on, a busy timeout
  (``connect_args={"timeout": busy_timeout_s}``), ``isolation_level = None``
  on the driver connection so SQLAlchemy emits ``BEGIN`` itself: ``BEGIN
  IMMEDIATE`` for every transaction opened by :func:`write_tx` (read-modify-
  write cannot lose updates), a plain deferred ``BEGIN`` for :func:`read_tx`.
* PostgreSQL (``postgresql://`` or ``postgres://`` or
  ``postgresql+psycopg://``): always the psycopg 3 driver, with a connect
  timeout and pre-ping.
* Anything else (``postgresql+asyncpg``, ``sqlite+aiosqlite``, MySQL, …) is
  refused: only the sync engine is used, from Trio in worker threads
  (:class:`Database`, :func:`run_in_thread`).

Errors from the database become :class:`ongridd.errors.StoreError` whose
message names the (password-redacted) URL and the operation.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import outcome
import sqlalchemy as sa
import trio
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from ongridd.errors import StoreError
from ongridd.store.fastsql import close_nowait_connection
from ongridd.logs import get_logger, redact_url

log = get_logger(__name__)

#: frames a background checkpoint may find in the WAL before the store writer commits once through a
#: thread, where SQLite checkpoints again with no commit racing it, so the next commit resets the
#: WAL: one and a half times SQLite's own checkpoint threshold (1,000).  The commits the writer
#: makes between two background checkpoints (``INLINE_CHECKPOINT_EVERY``, a model step's rows each,
#: about 7 frames) usually leave more than that, so the commit after a background checkpoint most
#: often goes through a thread: without it commits keep coming while checkpoints copy and the WAL
#: is seldom reset (measured: about twice as long)
WAL_BEHIND_FRAMES = 1500
#: how long closing the store waits for a background checkpoint to end
CHECKPOINT_CLOSE_WAIT_S = 5.0

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_S = 60.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_POOL_SIZE = 8

_SQLITE_DRIVERS = ("sqlite", "sqlite+pysqlite")
_PG_DRIVERS = ("postgresql", "postgres", "postgresql+psycopg")
_BEGIN_OPTION = "ongrid_sqlite_begin"


def normalize_url(url: str | URL) -> URL:
    """Parse a database URL and pin the driver.

    ``postgresql://`` and ``postgres://`` map to ``postgresql+psycopg://``;
    ``sqlite://`` to ``sqlite+pysqlite://``.  Raises StoreError for an
    unparsable URL, an unsupported scheme or driver (async drivers included),
    or an in-memory SQLite database (the daemon needs a file).
    """
    shown = redact_url(str(url)) if isinstance(url, str) else shown_url(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(f"invalid database URL {shown!r}: {exc}") from None
    name = parsed.drivername
    if name in _SQLITE_DRIVERS:
        db = parsed.database or ""
        if db in ("", ":memory:") or "mode=memory" in str(parsed.query):
            raise StoreError(
                f"database URL {shown!r}: in-memory SQLite is not supported; "
                "give a file, e.g. sqlite:////var/lib/ongrid/ongrid.db"
            )
        return parsed.set(drivername="sqlite+pysqlite")
    if name in _PG_DRIVERS:
        return parsed.set(drivername="postgresql+psycopg")
    raise StoreError(
        f"database URL {shown!r}: unsupported driver {name!r}; use sqlite:///<file> "
        "or postgresql://user@host/db (psycopg 3, sync; async drivers do not run under Trio)"
    )


def sqlite_file(url: str | URL) -> str | None:
    """The absolute path of the SQLite file a database URL names (a ``file:`` URI opened with
    ``uri=true`` included), or None: another backend, an in-memory database, a URL that does not
    parse.  Never raises."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    db = parsed.database or ""
    if parsed.drivername not in _SQLITE_DRIVERS or db in ("", ":memory:") or "mode=memory" in str(parsed.query):
        return None
    if str(parsed.query.get("uri", "")).lower() == "true" and db.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        db = unquote(urlsplit(db).path)
        if not db:
            return None
    return os.path.abspath(db)


def _create_owner_only(url: URL) -> None:
    """Create a SQLite database file that does not exist yet as an empty,
    owner-only (0600) file, so the conversations it will hold are not
    readable by every local user under a 022 umask (SQLite gives its -wal,
    -shm and -journal files the database file's mode).  A ``file:`` URI,
    an existing file or a failure is left to SQLite.  Never raises."""
    path = sqlite_file(url)
    if path is None or str(url.query.get("uri", "")).lower() == "true":
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    except OSError:
        pass


def shown_url(url: URL) -> str:
    """The URL as text with its passwords replaced by ``***``: the user part's, and
    ``password`` / ``sslpassword`` query parameters (:func:`~ongridd.logs.redact_url`)."""
    return redact_url(url.render_as_string(hide_password=True)) or ""


def create_engine(
    url: URL,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    pool_size: int = DEFAULT_POOL_SIZE,
) -> Engine:
    """A sync SQLAlchemy engine for a URL from :func:`normalize_url`.

    ``busy_timeout_s``: how long a SQLite writer waits for the write lock
    before "database is locked".  ``connect_timeout_s``: PostgreSQL connect
    timeout (whole seconds, at least 1).  ``pool_size``: connections kept;
    :class:`Database` never runs more threads than this, so no thread waits
    on the pool.  Creating the engine does not connect.
    """
    if url.drivername.startswith("sqlite"):
        _create_owner_only(url)
        engine = sa.create_engine(
            url,
            connect_args={"timeout": float(busy_timeout_s), "check_same_thread": False},
            pool_size=pool_size,
            max_overflow=0,
        )
        _install_sqlite_hooks(engine)
        return engine
    return sa.create_engine(
        url,
        connect_args={"connect_timeout": max(1, round(connect_timeout_s))},
        pool_size=pool_size,
        max_overflow=0,
        pool_pre_ping=True,
    )


def _install_sqlite_hooks(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module (trap 2).
        dbapi_connection.isolation_level = None
        cur = dbapi_connection.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
        finally:
            cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(_BEGIN_OPTION, "IMMEDIATE")
        sql = "BEGIN" if mode == "DEFERRED" else "BEGIN IMMEDIATE"
        # on the driver connection itself: every transaction pays for this, and
        # SQLAlchemy's statement machinery costs more than the BEGIN does
        try:
            conn.connection.dbapi_connection.execute(sql)  # type: ignore[union-attr]
        except sqlite3.Error as exc:  # raised as conn.exec_driver_sql would ("database is locked": transient)
            raise DBAPIError.instance(sql, (), exc, sqlite3.Error, dialect=conn.dialect) from exc


@contextlib.contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A read-modify-write transaction (SQLite: ``BEGIN IMMEDIATE``); commits on success."""
    with engine.connect() as conn, conn.begin():
        yield conn


@contextlib.contextmanager
def read_tx(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction (SQLite: deferred ``BEGIN``, a consistent WAL snapshot)."""
    with engine.connect() as conn:
        conn.execution_options(**{_BEGIN_OPTION: "DEFERRED"})
        with conn.begin():
            yield conn


def is_unique_violation(exc: BaseException) -> bool:
    """True when ``exc`` is a unique-constraint violation on SQLite or PostgreSQL."""
    if not isinstance(exc, sa.exc.IntegrityError):
        return False
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == "23505":
        return True
    return "UNIQUE constraint failed" in str(orig)


# SQLSTATE classes/codes worth retrying: connection exceptions (08…), serialization
# failure and deadlock (40001, 40P01), operator intervention / shutdown (57P01–57P03),
# lock not available (55P03), too many connections (53300).
_TRANSIENT_SQLSTATES = ("40001", "40P01", "55P03", "53300", "57P01", "57P02", "57P03")


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same transaction later can succeed: SQLite
    "database is locked"/"busy", a lost or refused connection, a PostgreSQL
    serialization failure, deadlock or server restart.  False for everything
    else (constraint violations, NotFound, bad SQL, programming errors)."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    state = getattr(orig, "sqlstate", None)
    if isinstance(state, str) and (state.startswith("08") or state in _TRANSIENT_SQLSTATES):
        return True
    if isinstance(orig, sqlite3.OperationalError):
        text = str(orig)
        return "database is locked" in text or "database is busy" in text or "disk I/O error" in text
    if isinstance(exc, sa.exc.OperationalError) and state is None:
        # a driver without SQLSTATE (connection refused before a session existed)
        return "connect" in str(orig).lower() or "closed" in str(orig).lower()
    return False


def describe_error(exc: BaseException, url: URL) -> str:
    """A one-line, password-free description of a database error."""
    detail = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    text = " ".join(str(detail).split()) or type(detail).__name__
    if url.password:
        text = text.replace(str(url.password), "***")
    if "database is locked" in text:
        text += " (another process holds the SQLite write lock; is a second daemon using this state dir?)"
    return f"{type(detail).__name__}: {text}"


class _Slots:
    """The pool's thread slots (a CapacityLimiter wrapper): a free slot is taken without the
    limiter's extra schedule point (each database call pays for one trip
    through the scheduler less); a call waits in FIFO order when none is
    free.  (The caller has just checked for cancellation.)"""

    def __init__(self, size: int):
        self.limiter = trio.CapacityLimiter(size)

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        try:
            self.limiter.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            await self.limiter.acquire_on_behalf_of(borrower)

    def release_on_behalf_of(self, borrower: object) -> None:
        self.limiter.release_on_behalf_of(borrower)


async def run_in_thread(fn: Callable[..., T], *args: Any, slots: _Slots) -> T:
    """``fn(*args)`` in a worker thread of Trio's thread cache, holding one of
    ``slots``; returns its result or raises its exception.

    The same contract as ``trio.to_thread.run_sync`` without cancellation
    abandoning the thread, for less work per call: the thread is not renamed
    for every job (two ``prctl`` calls and a name built from the task), and
    the result comes back as one reschedule.  The caller's context variables
    are visible in the thread.  Cancellation: while waiting for a slot, at
    once; once the thread runs, the call finishes (commit or rollback) and
    its result is returned — the cancellation is delivered at the caller's
    next checkpoint, so no transaction is left half-done.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    borrower = object()
    await slots.acquire_on_behalf_of(borrower)
    try:
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[T]) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        trio.lowlevel.start_thread_soon(functools.partial(contextvars.copy_context().run, fn, *args), deliver)
        # the outcome is unwrapped here: the value returned, or the thread's exception raised
        result: T = await trio.lowlevel.wait_task_rescheduled(lambda _raise_cancel: trio.lowlevel.Abort.FAILED)
    finally:
        slots.release_on_behalf_of(borrower)
    return result


class NotNow:
    """The type of :data:`NOT_NOW`: :meth:`Database.try_now` could not go ahead at once."""


NOT_NOW = NotNow()


class Database:
    """An engine plus the bridge that runs blocking database work off the Trio loop.

    ``run(what, fn, *args)`` calls ``fn(engine, *args)`` in a worker thread
    and returns its result; ``run_read`` is the same for work that only
    reads.  At most ``pool_size`` calls run at once, so no thread blocks on
    the pool.  SQLite writers are serialised by SQLite itself (``BEGIN
    IMMEDIATE`` + busy timeout), not by an in-process queue: measured with 50
    writers, overlapping the thread hand-offs gives 2–3× the throughput of
    queueing writes one at a time.

    Database errors become StoreError naming ``what`` and the redacted URL.
    Cancellation: a call still queued for a slot is cancelled at once; a
    call already running in its thread finishes (commit or rollback) before
    the cancellation is delivered, so no transaction is left half-done.
    """

    def __init__(self, engine: Engine, url: URL, pool_size: int):
        self.engine = engine
        self.url = url
        self._slots = _Slots(pool_size)
        self._closed = False
        self._checkpointing = False
        self._checkpoint_idle = threading.Event()
        self._checkpoint_idle.set()
        #: background WAL checkpoints finished (tests and benchmarks read it)
        self.checkpoints = 0
        #: set by a background checkpoint that found the WAL longer than WAL_BEHIND_FRAMES (commits
        #: kept coming while it copied, so the WAL was never reset): the store writer then commits once
        #: in a thread, where SQLite's own checkpoint runs with no commit racing it and the next
        #: writer resets the WAL, which so stays bounded
        self.wal_behind = False

    @property
    def closed(self) -> bool:
        return self._closed

    def call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(engine, *args)`` in this thread, translating database errors."""
        if self._closed:
            raise StoreError(f"database {shown_url(self.url)}: {what} after the store was closed")
        try:
            return fn(self.engine, *args)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise self._failed(what, exc) from None

    def _failed(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"database {shown_url(self.url)}: {what} failed: {describe_error(exc, self.url)}")

    async def run(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """Async twin of :meth:`call` for work that writes (see the class doc)."""
        return await run_in_thread(self.call, what, fn, *args, slots=self._slots)

    async def run_read(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """Async twin of :meth:`call` for work that only reads."""
        return await run_in_thread(self.call, what, fn, *args, slots=self._slots)

    async def run_raw(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(engine, *args)`` in a worker thread (one pool slot) with the
        database's own exceptions left as they are (the store writer sorts
        them with :func:`is_transient`).  StoreError after :meth:`aclose`.
        Cancellation as :meth:`run`."""
        if self._closed:
            raise StoreError(f"database {shown_url(self.url)}: write after the store was closed")
        return await run_in_thread(fn, self.engine, *args, slots=self._slots)

    def try_now(self, fn: Callable[..., T], *args: Any) -> T | NotNow:
        """SQLite: ``fn(engine, *args)`` on the calling thread (the event
        loop's), holding one pool slot — for short work that never waits for
        a lock (see ``raw_write_tx(nowait=True)``); it blocks the caller for
        as long as it runs.  :data:`NOT_NOW` — nothing was done — when it
        cannot go ahead at once: not SQLite, the store closed, no free slot,
        or a transient error ("database is locked": the write lock is held
        elsewhere); the caller then goes through a thread, which may wait.
        Other database errors are raised as they are (as :meth:`run_raw`)."""
        if self._closed or self.engine.dialect.name != "sqlite":
            return NOT_NOW
        borrower = object()
        try:
            self._slots.limiter.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            return NOT_NOW
        try:
            return fn(self.engine, *args)
        except Exception as exc:
            if is_transient(exc):
                return NOT_NOW
            raise
        finally:
            self._slots.limiter.release_on_behalf_of(borrower)

    async def run_write_soon(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`run` for a short write transaction ``fn(engine, *args,
        nowait=...)``: first tried with ``nowait=True`` by :meth:`try_now`
        (no thread hop), else run in a thread as :meth:`run` does.  Errors
        and cancellation as :meth:`run`."""
        try:
            done = self.try_now(functools.partial(fn, nowait=True), *args)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise self._failed(what, exc) from None
        if not isinstance(done, NotNow):
            return done
        return await self.run(what, functools.partial(fn, nowait=False), *args)

    def checkpoint_soon(self) -> bool:
        """SQLite: start a WAL checkpoint in a background thread, on a
        connection of its own, and return at once (False: not SQLite, closed,
        or one is still running).  ``PASSIVE``: it copies what it can without
        waiting for readers or writers, who go on meanwhile — for commits
        that skipped the automatic checkpoint (``raw_write_tx(nowait=True)``).
        A failure is logged, never raised.  A database file that is gone is
        not created again (the file is opened read-write, never created).
        When the WAL still holds more than :data:`WAL_BEHIND_FRAMES` frames
        afterwards, :attr:`wal_behind` is set."""
        database = self.engine.url.database
        if self._closed or self._checkpointing or self.engine.dialect.name != "sqlite" or not database:
            return False
        self._checkpointing = True
        self._checkpoint_idle.clear()
        uri = f"file:{urllib.parse.quote(os.path.abspath(database))}?mode=rw"

        def checkpoint() -> int | None:
            # PASSIVE never invokes the busy handler: the timeout only bounds opening the file
            con = sqlite3.connect(uri, uri=True, timeout=1.0, isolation_level=None)
            try:
                if self._closed:  # the store closed while this opened the file: leave it alone
                    return None
                row = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                con.close()
            # the WAL's size in frames: a WAL copied in full is reset by the next writer, one that is
            # copied while commits keep coming never is, and only grows
            return int(row[1]) if row and row[1] >= 0 else 0

        def done(result: outcome.Outcome[int | None]) -> None:  # in the worker thread
            try:
                if isinstance(result, outcome.Error):
                    log.warning("store_checkpoint_failed", error=describe_error(result.error, self.url))
                elif isinstance(result, outcome.Value) and result.value is not None:
                    self.checkpoints += 1
                    if result.value > WAL_BEHIND_FRAMES:
                        self.wal_behind = True
            finally:
                self._checkpointing = False
                self._checkpoint_idle.set()

        trio.lowlevel.start_thread_soon(checkpoint, done)
        return True

    async def aclose(self) -> None:
        """Dispose of the pool (idempotent), once a background checkpoint
        still running has ended (waited for up to :data:`CHECKPOINT_CLOSE_WAIT_S`
        in a thread; one still opening the file after that does nothing).
        The event loop thread's kept SQLite connection is closed first, so
        cancellation during the wait leaves it closed (the pool is then left
        to the engine's garbage collection)."""
        if self._closed:
            return
        self._closed = True
        # the loop thread's own connection (try_now) first: nothing uses it once closed, and a
        # cancelled wait below must not leave it open
        close_nowait_connection(self.engine)
        if not self._checkpoint_idle.is_set():
            await trio.to_thread.run_sync(self._checkpoint_idle.wait, CHECKPOINT_CLOSE_WAIT_S)
        await trio.to_thread.run_sync(self.engine.dispose)
